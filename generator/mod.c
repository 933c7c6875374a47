/* mod.c: a custom mod's tree (mod.h): its structural check, canonical text and id, and its evaluation in
 * fp64 for the CPU reference. The evaluation states the semantics the emitted device code (mod_emit.c)
 * follows: 32-bit wrapping ints, floor division and a modulo of the divisor's sign, and a "bad" mark that an
 * out-of-range load or an int division by zero sets on its node and that travels to the nodes using it (a
 * where takes only its chosen branch's), so a guarded load is harmless and an unguarded one turns the score
 * into NaN. */
#include "generator/mod.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/sha256.h"

/* The operators: name in canonical texts, operand count, and whether their operands and result are ints, floats
 * or bools (checked by op_types_ok). */
static const struct {
    const char *name;
    int arity;
} ops[MOD_OP_COUNT] = {
    [MOD_CONST] = {"const", 0}, [MOD_ARG] = {"arg", 0},   [MOD_LOAD] = {"load", 1},   [MOD_NEG] = {"neg", 1},
    [MOD_ADD] = {"add", 2},     [MOD_SUB] = {"sub", 2},   [MOD_MUL] = {"mul", 2},     [MOD_DIV] = {"div", 2},
    [MOD_IDIV] = {"idiv", 2},   [MOD_MOD] = {"mod", 2},   [MOD_MIN] = {"min", 2},     [MOD_MAX] = {"max", 2},
    [MOD_ABS] = {"abs", 1},     [MOD_EXP] = {"exp", 1},   [MOD_LOG] = {"log", 1},     [MOD_TANH] = {"tanh", 1},
    [MOD_SQRT] = {"sqrt", 1},   [MOD_FLOAT] = {"float", 1}, [MOD_EQ] = {"eq", 2},     [MOD_NE] = {"ne", 2},
    [MOD_LT] = {"lt", 2},       [MOD_LE] = {"le", 2},     [MOD_GT] = {"gt", 2},       [MOD_GE] = {"ge", 2},
    [MOD_AND] = {"and", 2},     [MOD_OR] = {"or", 2},     [MOD_NOT] = {"not", 1},     [MOD_WHERE] = {"where", 3},
    [MOD_FLOOR] = {"floor", 1},
};

static const char *type_name(int t) { return t == MOD_T_INT ? "int" : t == MOD_T_FLOAT ? "float" : "bool"; }

static int name_ok(const char *s) {
    size_t n = strnlen(s, MOD_NAME_MAX);
    if (n == 0 || n >= MOD_NAME_MAX || (s[0] >= '0' && s[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return 0;
    }
    return 1;
}

/* Whether node i's operand and result types fit its operator; *why names the rule otherwise. */
static int op_types_ok(const fg_mod *m, int i, const char **why) {
    const mod_node *n = &m->nodes[i];
    const int t = n->type;
    const int ta = n->a >= 0 ? m->nodes[n->a].type : -1, tb = n->b >= 0 ? m->nodes[n->b].type : -1;
    const int tc = n->c >= 0 ? m->nodes[n->c].type : -1;
    switch ((mod_op)n->op) {
    case MOD_CONST: *why = "a constant is an int or a float"; return t != MOD_T_BOOL;
    case MOD_ARG: *why = "s is a float and b, h, q, kv ints"; return t == (n->arg == MOD_ARG_S ? MOD_T_FLOAT : MOD_T_INT);
    case MOD_LOAD: *why = "a load takes int indices and gives its array's dtype";
        return ta == MOD_T_INT && (n->b < 0 || tb == MOD_T_INT) && t == (m->aux[n->arg].is_int ? MOD_T_INT : MOD_T_FLOAT);
    case MOD_NEG: case MOD_ABS: *why = "its operand and result are one number type"; return t != MOD_T_BOOL && ta == t;
    case MOD_ADD: case MOD_SUB: case MOD_MUL: case MOD_MIN: case MOD_MAX:
        *why = "its operands and result are one number type"; return t != MOD_T_BOOL && ta == t && tb == t;
    case MOD_DIV: *why = "float division takes and gives floats"; return t == MOD_T_FLOAT && ta == t && tb == t;
    case MOD_IDIV: case MOD_MOD: *why = "// and % take and give ints"; return t == MOD_T_INT && ta == t && tb == t;
    case MOD_EXP: case MOD_LOG: case MOD_TANH: case MOD_SQRT: *why = "it takes and gives a float";
        return t == MOD_T_FLOAT && ta == t;
    case MOD_FLOAT: *why = "float() takes an int and gives a float"; return t == MOD_T_FLOAT && ta == MOD_T_INT;
    case MOD_FLOOR: *why = "floor() takes a float and gives an int"; return t == MOD_T_INT && ta == MOD_T_FLOAT;
    case MOD_EQ: case MOD_NE: case MOD_LT: case MOD_LE: case MOD_GT: case MOD_GE:
        *why = "a comparison takes two numbers of one type and gives a bool"; return t == MOD_T_BOOL && ta != MOD_T_BOOL && ta == tb;
    case MOD_AND: case MOD_OR: *why = "logic takes and gives bools"; return t == MOD_T_BOOL && ta == t && tb == t;
    case MOD_NOT: *why = "logic takes and gives bools"; return t == MOD_T_BOOL && ta == t;
    case MOD_WHERE: *why = "where takes a bool and two values of its result's type"; return ta == MOD_T_BOOL && tb == t && tc == t;
    case MOD_OP_COUNT: break;
    }
    *why = "unknown operator";
    return 0;
}

fg_status mod_check(const fg_mod *m, fg_error *err) {
    if (!m) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the mod is NULL");
    if (m->n_aux < 0 || m->n_aux > MOD_MAX_AUX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "a mod has 0 to %d aux arrays (got %d)", MOD_MAX_AUX, m->n_aux);
    for (int i = 0; i < m->n_aux; i++) {
        const mod_aux *x = &m->aux[i];
        if (!name_ok(x->name))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "aux %d's name is not [A-Za-z_][A-Za-z0-9_]* of at most %d bytes",
                           i, MOD_NAME_MAX - 1);
        if (x->is_int > 1 || x->rank < 1 || x->rank > 2)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "aux %s: an aux array is f32 or i32, of rank 1 or 2", x->name);
        if (x->trainable > 1 || (x->trainable && x->is_int))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "aux %s: only an f32 array is trainable", x->name);
        if (i > 0 && strcmp(m->aux[i - 1].name, x->name) >= 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the aux arrays are in the order of their names, each once (%s after %s)",
                           x->name, m->aux[i - 1].name);
    }
    if (m->n_nodes < 1 || m->n_nodes > MOD_MAX_NODES)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "a mod has 1 to %d nodes (got %d)", MOD_MAX_NODES, m->n_nodes);
    for (int i = 0; i < m->n_nodes; i++) {
        const mod_node *n = &m->nodes[i];
        if (n->op >= MOD_OP_COUNT) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d: unknown operator %d", i, n->op);
        const int ar = n->op == MOD_LOAD && n->arg >= 0 && n->arg < m->n_aux ? m->aux[n->arg].rank : ops[n->op].arity;
        const int16_t opnd[3] = {n->a, n->b, n->c};
        for (int k = 0; k < 3; k++)
            if ((k < ar && (opnd[k] < 0 || opnd[k] >= i)) || (k >= ar && opnd[k] != -1))
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d (%s): operand %d must %s", i, ops[n->op].name, k,
                               k < ar ? "name an earlier node" : "be -1 (unused)");
        if (n->op == MOD_LOAD && (n->arg < 0 || n->arg >= m->n_aux))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d loads aux %d of %d", i, n->arg, m->n_aux);
        if (n->op == MOD_ARG && (n->arg < MOD_ARG_S || n->arg > MOD_ARG_KV))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d is argument %d: there are five (s, b, h, q, kv)", i, n->arg);
        if (n->op != MOD_ARG && n->op != MOD_LOAD && n->arg != -1)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d (%s): its argument index must be -1 (unused)", i,
                           ops[n->op].name);
        if (n->type > MOD_T_BOOL) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d: unknown type %d", i, n->type);
        const char *why = "";
        if (!op_types_ok(m, i, &why))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d (%s, %s): %s", i, ops[n->op].name, type_name(n->type), why);
        if (n->op == MOD_CONST) {
            if (!isfinite(n->value)) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d: a constant is finite", i);
            if (n->type == MOD_T_INT && (n->value != floor(n->value) || n->value < -2147483648.0 || n->value > 2147483647.0))
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d: an int constant is a 32-bit integer (got %.17g)", i,
                               n->value);
        } else if (n->value != 0.0) {
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d (%s) has a value", i, ops[n->op].name);
        }
        if ((n->op == MOD_IDIV || n->op == MOD_MOD) && m->nodes[n->b].op == MOD_CONST && m->nodes[n->b].value == 0.0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "node %d divides by the constant 0", i);
    }
    if (m->score < -1 || m->score >= m->n_nodes || m->mask < -1 || m->mask >= m->n_nodes || (m->score < 0 && m->mask < 0))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "a mod has a score_mod, a mask_mod or both (results %d, %d of %d nodes)",
                       m->score, m->mask, m->n_nodes);
    if (m->score >= 0 && m->nodes[m->score].type != MOD_T_FLOAT)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "score_mod's result is a float (node %d is a %s)", m->score,
                       type_name(m->nodes[m->score].type));
    if (m->mask >= 0 && m->nodes[m->mask].type != MOD_T_BOOL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mask_mod's result is a bool (node %d is a %s)", m->mask,
                       type_name(m->nodes[m->mask].type));
    return FG_OK;
}

int mod_canonical(const fg_mod *m, char *buf, size_t n) {
    size_t len = 0;
#define PUT(...)                                                                          \
    do {                                                                                  \
        const int w_ = snprintf(buf + len, len < n ? n - len : 0, __VA_ARGS__);          \
        if (w_ < 0) return -1;                                                            \
        len += (size_t)w_;                                                                \
    } while (0)
    for (int i = 0; i < m->n_aux; i++)
        PUT("aux %s %s %d%s\n", m->aux[i].name, m->aux[i].is_int ? "i32" : "f32", m->aux[i].rank,
            m->aux[i].trainable ? " trainable" : "");
    for (int i = 0; i < m->n_nodes; i++) {
        const mod_node *x = &m->nodes[i];
        PUT("%d %s %s %d %d %d %d %a\n", i, x->op < MOD_OP_COUNT ? ops[x->op].name : "?", type_name(x->type), x->a, x->b,
            x->c, x->arg, x->value);
    }
    PUT("score %d mask %d\n", m->score, m->mask);
#undef PUT
    return len < n ? (int)len : -1;
}

void mod_id(const fg_mod *m, char *buf) {
    /* nodes and aux entries print in bounded text: 96 bytes a node and 48 an aux is ample */
    char text[MOD_MAX_NODES * 96 + MOD_MAX_AUX * 48 + 64];
    const int len = mod_canonical(m, text, sizeof text);
    uint8_t d[32];
    sha256(text, len > 0 ? (size_t)len : 0, d);
    char hex[65];
    sha256_hex(d, hex);
    memcpy(buf, hex, MOD_ID_LEN);
    buf[MOD_ID_LEN] = '\0';
}

/* ---- evaluation ---- */

static int32_t wrap32(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }

static int32_t floor_div(int32_t a, int32_t b) { /* b != 0 */
    if (b == -1) return wrap32(-(int64_t)a);
    int32_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int32_t floor_mod(int32_t a, int32_t b) { /* b != 0: the divisor's sign */
    if (b == -1) return 0;
    int32_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

/* Every node's value (floats in f, ints and bools in k) and bad mark, in order, up to node `last`. */
static void eval_nodes(const fg_mod *m, const mod_inputs *in, int last, double *f, int32_t *k, unsigned char *bad) {
    for (int i = 0; i <= last; i++) {
        const mod_node *n = &m->nodes[i];
        const int a = n->a, b = n->b, c = n->c;
        const int is_f = n->type == MOD_T_FLOAT;
        const int fa = a >= 0 && m->nodes[a].type == MOD_T_FLOAT; /* operands' type (comparisons) */
        bad[i] = (a >= 0 && bad[a]) || (b >= 0 && n->op != MOD_WHERE && bad[b]);
        f[i] = 0.0, k[i] = 0;
        switch ((mod_op)n->op) {
        case MOD_CONST: if (is_f) f[i] = n->value; else k[i] = (int32_t)n->value; break;
        case MOD_ARG:
            if (n->arg == MOD_ARG_S) f[i] = in->s;
            else k[i] = n->arg == MOD_ARG_B ? in->b : n->arg == MOD_ARG_H ? in->h : n->arg == MOD_ARG_Q ? in->q : in->kv;
            break;
        case MOD_LOAD: {
            const int x = n->arg;
            const int64_t i0 = k[a], i1 = b >= 0 ? k[b] : 0, e0 = in->extent[x][0], e1 = m->aux[x].rank == 2 ? in->extent[x][1] : 1;
            if (i0 < 0 || i0 >= e0 || i1 < 0 || i1 >= e1 || !in->aux[x]) {
                bad[i] = 1;
                break;
            }
            const int64_t at = i0 * e1 + i1;
            if (m->aux[x].is_int) k[i] = ((const int32_t *)in->aux[x])[at];
            else f[i] = ((const float *)in->aux[x])[at];
            break;
        }
        case MOD_NEG: if (is_f) f[i] = -f[a]; else k[i] = wrap32(-(int64_t)k[a]); break;
        case MOD_ADD: if (is_f) f[i] = f[a] + f[b]; else k[i] = wrap32((int64_t)k[a] + k[b]); break;
        case MOD_SUB: if (is_f) f[i] = f[a] - f[b]; else k[i] = wrap32((int64_t)k[a] - k[b]); break;
        case MOD_MUL: if (is_f) f[i] = f[a] * f[b]; else k[i] = wrap32((int64_t)k[a] * k[b]); break;
        case MOD_DIV: f[i] = f[a] / f[b]; break;
        case MOD_IDIV: case MOD_MOD:
            if (k[b] == 0) bad[i] = 1;
            else k[i] = n->op == MOD_IDIV ? floor_div(k[a], k[b]) : floor_mod(k[a], k[b]);
            break;
        case MOD_MIN: if (is_f) f[i] = fmin(f[a], f[b]); else k[i] = k[a] < k[b] ? k[a] : k[b]; break;
        case MOD_MAX: if (is_f) f[i] = fmax(f[a], f[b]); else k[i] = k[a] > k[b] ? k[a] : k[b]; break;
        case MOD_ABS: if (is_f) f[i] = fabs(f[a]); else k[i] = k[a] < 0 ? wrap32(-(int64_t)k[a]) : k[a]; break;
        case MOD_EXP: f[i] = exp(f[a]); break;
        case MOD_LOG: f[i] = log(f[a]); break;
        case MOD_TANH: f[i] = tanh(f[a]); break;
        case MOD_SQRT: f[i] = sqrt(f[a]); break;
        case MOD_FLOAT: f[i] = (double)(float)k[a]; break; /* fp32's rounding of a large int, as the kernels */
        case MOD_FLOOR: {
            const double x = floor((double)(float)f[a]); /* the kernels floor the fp32 value */
            if (x >= -2147483648.0 && x <= 2147483647.0) k[i] = (int32_t)x;
            else bad[i] = 1;
            break;
        }
        case MOD_EQ: k[i] = fa ? f[a] == f[b] : k[a] == k[b]; break;
        case MOD_NE: k[i] = fa ? f[a] != f[b] : k[a] != k[b]; break;
        case MOD_LT: k[i] = fa ? f[a] < f[b] : k[a] < k[b]; break;
        case MOD_LE: k[i] = fa ? f[a] <= f[b] : k[a] <= k[b]; break;
        case MOD_GT: k[i] = fa ? f[a] > f[b] : k[a] > k[b]; break;
        case MOD_GE: k[i] = fa ? f[a] >= f[b] : k[a] >= k[b]; break;
        case MOD_AND: k[i] = k[a] && k[b]; break;
        case MOD_OR: k[i] = k[a] || k[b]; break;
        case MOD_NOT: k[i] = !k[a]; break;
        case MOD_WHERE: {
            const int pick = k[a] ? b : c;
            f[i] = f[pick], k[i] = k[pick];
            bad[i] = bad[a] || bad[pick];
            break;
        }
        case MOD_OP_COUNT: break;
        }
    }
}

double mod_eval_score(const fg_mod *m, const mod_inputs *in) {
    if (m->score < 0) return in->s;
    double f[MOD_MAX_NODES];
    int32_t k[MOD_MAX_NODES];
    unsigned char bad[MOD_MAX_NODES];
    eval_nodes(m, in, m->score, f, k, bad);
    return bad[m->score] ? NAN : f[m->score];
}

int mod_eval_mask(const fg_mod *m, const mod_inputs *in) {
    if (m->mask < 0) return 1;
    double f[MOD_MAX_NODES];
    int32_t k[MOD_MAX_NODES];
    unsigned char bad[MOD_MAX_NODES];
    eval_nodes(m, in, m->mask, f, k, bad);
    return bad[m->mask] ? -1 : k[m->mask] != 0;
}

double mod_eval_node(const fg_mod *m, int node, const mod_inputs *in) {
    if (node < 0 || node >= m->n_nodes || m->nodes[node].type != MOD_T_FLOAT) return NAN;
    double f[MOD_MAX_NODES];
    int32_t k[MOD_MAX_NODES];
    unsigned char bad[MOD_MAX_NODES];
    eval_nodes(m, in, node, f, k, bad);
    return bad[node] ? NAN : f[node];
}

int mod_mask_reads(const fg_mod *m, int op, int arg) {
    if (m->mask < 0) return 0;
    unsigned char need[MOD_MAX_NODES] = {0};
    need[m->mask] = 1;
    for (int i = m->mask; i >= 0; i--) {
        if (!need[i]) continue;
        const mod_node *n = &m->nodes[i];
        if (n->op == op && (arg < 0 || n->arg == arg)) return 1;
        if (n->a >= 0) need[n->a] = 1;
        if (n->b >= 0) need[n->b] = 1;
        if (n->c >= 0) need[n->c] = 1;
    }
    return 0;
}

int mod_eval_site(const fg_mod *m, const mod_grad_site *site, const mod_inputs *in, int64_t *at, double *partial) {
    const int load = site->load, last = site->partial > load ? site->partial : load;
    if (load < 0 || last >= m->n_nodes || m->nodes[load].op != MOD_LOAD) return 0;
    double f[MOD_MAX_NODES];
    int32_t k[MOD_MAX_NODES];
    unsigned char bad[MOD_MAX_NODES];
    eval_nodes(m, in, last, f, k, bad);
    const mod_node *n = &m->nodes[load];
    if (bad[load] || bad[site->partial]) return 0;
    *at = (int64_t)k[n->a] * (m->aux[n->arg].rank == 2 ? in->extent[n->arg][1] : 1) + (n->b >= 0 ? k[n->b] : 0);
    *partial = f[site->partial];
    return 1;
}

int mod_loads_by_position(const fg_mod *m) {
    unsigned char pos[MOD_MAX_NODES]; /* node i depends on q or kv */
    for (int i = 0; i < m->n_nodes; i++) {
        const mod_node *n = &m->nodes[i];
        pos[i] = n->op == MOD_ARG && (n->arg == MOD_ARG_Q || n->arg == MOD_ARG_KV);
        for (int k = 0, o[3] = {n->a, n->b, n->c}; k < 3; k++)
            if (o[k] >= 0 && pos[o[k]]) pos[i] = 1;
        if (n->op == MOD_LOAD && pos[i]) return 1;
    }
    return 0;
}
