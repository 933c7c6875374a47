/* mod_tree_check.h: the structure every tree mod_trace returns keeps (generator/mod.h), checked from the tree
 * alone, for test_mod_trace.c and the fuzzer (tests/fuzz/fuzz_mod.c): operands before their users, each op's
 * operand count and types, finite constants (ints exact and 32-bit, floats in fp32's range), no constant
 * zero divisor of // or %, loads of listed arrays with one int index per rank, aux names that are
 * identifiers in strcmp order, no two nodes alike, every node reached from a result, a float score, a bool
 * mask that does not read s, and the unused fields at -1 (operands, arg) and 0 (value).
 * This checks mod_trace's own promises independently of generator/mod.c's mod_check, which checks trees
 * from elsewhere. Header-only (a static inline function): each program includes it once. */
#ifndef FG_TESTS_MOD_TREE_CHECK_H
#define FG_TESTS_MOD_TREE_CHECK_H

#include <float.h>
#include <math.h>
#include <string.h>
#include "generator/mod.h"

/* Whether node i of m reaches (depends on) an argument node of `arg`; seen: MOD_MAX_NODES bytes of scratch. */
static inline int mod_tree_reaches_arg(const fg_mod *m, int i, int arg, unsigned char *seen) {
    if (i < 0 || seen[i])
        return 0;
    seen[i] = 1;
    const mod_node *n = &m->nodes[i];
    if (n->op == MOD_ARG)
        return n->arg == arg;
    return mod_tree_reaches_arg(m, n->a, arg, seen) || mod_tree_reaches_arg(m, n->b, arg, seen) ||
           mod_tree_reaches_arg(m, n->c, arg, seen);
}

/* Marks in `reached` the nodes that node i depends on, itself included. */
static inline void mod_tree_mark(const fg_mod *m, int i, unsigned char *reached) {
    if (i < 0 || reached[i])
        return;
    reached[i] = 1;
    mod_tree_mark(m, m->nodes[i].a, reached);
    mod_tree_mark(m, m->nodes[i].b, reached);
    mod_tree_mark(m, m->nodes[i].c, reached);
}

/* NULL when m keeps every rule above; otherwise the first rule it breaks, as a sentence (static). */
static inline const char *mod_tree_problem(const fg_mod *m) {
    if (m->n_nodes < 1 || m->n_nodes > MOD_MAX_NODES)
        return "the node count is outside 1..MOD_MAX_NODES";
    if (m->n_aux < 0 || m->n_aux > MOD_MAX_AUX)
        return "the aux count is outside 0..MOD_MAX_AUX";
    if (m->score < -1 || m->score >= m->n_nodes || m->mask < -1 || m->mask >= m->n_nodes)
        return "a result is not a node";
    if (m->score < 0 && m->mask < 0)
        return "the tree has neither a score nor a mask";
    for (int i = 0; i < m->n_aux; i++) {
        const mod_aux *x = &m->aux[i];
        size_t len = strnlen(x->name, MOD_NAME_MAX);
        if (len == 0 || len == MOD_NAME_MAX || (x->name[0] >= '0' && x->name[0] <= '9'))
            return "an aux name is empty, unterminated or starts with a digit";
        for (size_t k = 0; k < len; k++) {
            char c = x->name[k];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
                return "an aux name has a byte outside [A-Za-z0-9_]";
        }
        if (i > 0 && strcmp(m->aux[i - 1].name, x->name) >= 0)
            return "the aux names are not in strictly increasing strcmp order";
        if (x->rank < 1 || x->rank > 2 || x->is_int > 1)
            return "an aux array's rank or dtype is out of range";
    }
    for (int i = 0; i < m->n_nodes; i++) {
        const mod_node *n = &m->nodes[i];
        const int ops[3] = {n->a, n->b, n->c};
        int want = 2; /* operands the op takes */
        switch (n->op) {
        case MOD_CONST: case MOD_ARG: want = 0; break;
        case MOD_LOAD: want = n->arg >= 0 && n->arg < m->n_aux ? m->aux[n->arg].rank : 0; break;
        case MOD_NEG: case MOD_ABS: case MOD_EXP: case MOD_LOG: case MOD_TANH: case MOD_SQRT: case MOD_FLOAT:
        case MOD_FLOOR: case MOD_NOT: want = 1; break;
        case MOD_WHERE: want = 3; break;
        default: if (n->op >= MOD_OP_COUNT) return "a node's op is unknown";
        }
        if (n->type > MOD_T_BOOL)
            return "a node's type is unknown";
        int t[3] = {-1, -1, -1};
        for (int k = 0; k < 3; k++) {
            if (k < want && (ops[k] < 0 || ops[k] >= i))
                return "an operand is not an earlier node";
            if (k >= want && ops[k] != -1)
                return "an unused operand is not -1";
            if (k < want)
                t[k] = m->nodes[ops[k]].type;
        }
        if ((n->op == MOD_ARG || n->op == MOD_LOAD) != (n->arg != -1))
            return "arg is set on a node other than ARG and LOAD, or missing on one";
        if (n->op != MOD_CONST && n->value != 0.0)
            return "value is set on a node other than CONST";
        int num = n->type != MOD_T_BOOL;
        switch (n->op) {
        case MOD_CONST:
            if (!num || !isfinite(n->value))
                return "a constant is a bool or not finite";
            if (n->type == MOD_T_INT && (n->value != floor(n->value) || n->value < INT32_MIN || n->value > INT32_MAX))
                return "an int constant is not a 32-bit integer";
            if (fabs(n->value) > FLT_MAX)
                return "a float constant is outside fp32's range";
            break;
        case MOD_ARG:
            if (n->arg < MOD_ARG_S || n->arg > MOD_ARG_KV || (n->type == MOD_T_FLOAT) != (n->arg == MOD_ARG_S) || !num)
                return "an argument node's arg or type is wrong";
            break;
        case MOD_LOAD:
            if (n->arg < 0 || n->arg >= m->n_aux)
                return "a load's aux index is not a listed array";
            if (n->type != (m->aux[n->arg].is_int ? MOD_T_INT : MOD_T_FLOAT))
                return "a load's type is not its array's dtype";
            for (int k = 0; k < want; k++)
                if (t[k] != MOD_T_INT)
                    return "a load's index is not an int";
            break;
        case MOD_NEG: case MOD_ABS:
            if (!num || t[0] != n->type)
                return "NEG or ABS is not of its operand's number type";
            break;
        case MOD_ADD: case MOD_SUB: case MOD_MUL: case MOD_MIN: case MOD_MAX:
            if (!num || t[0] != n->type || t[1] != n->type)
                return "an arithmetic node's operands are not of its number type";
            break;
        case MOD_DIV:
            if (n->type != MOD_T_FLOAT || t[0] != MOD_T_FLOAT || t[1] != MOD_T_FLOAT)
                return "a division is not float on floats";
            break;
        case MOD_IDIV: case MOD_MOD:
            if (n->type != MOD_T_INT || t[0] != MOD_T_INT || t[1] != MOD_T_INT)
                return "// or % is not int on ints";
            if (m->nodes[n->b].op == MOD_CONST && m->nodes[n->b].value == 0.0)
                return "// or % has the constant divisor 0";
            break;
        case MOD_EXP: case MOD_LOG: case MOD_TANH: case MOD_SQRT:
            if (n->type != MOD_T_FLOAT || t[0] != MOD_T_FLOAT)
                return "exp, log, tanh or sqrt is not float on a float";
            break;
        case MOD_FLOAT:
            if (n->type != MOD_T_FLOAT || t[0] != MOD_T_INT)
                return "FLOAT is not float on an int";
            break;
        case MOD_FLOOR:
            if (n->type != MOD_T_INT || t[0] != MOD_T_FLOAT)
                return "FLOOR is not int on a float";
            break;
        case MOD_EQ: case MOD_NE: case MOD_LT: case MOD_LE: case MOD_GT: case MOD_GE:
            if (n->type != MOD_T_BOOL || t[0] != t[1] || t[0] == MOD_T_BOOL)
                return "a comparison is not bool on two numbers of one type";
            break;
        case MOD_AND: case MOD_OR: case MOD_NOT:
            if (n->type != MOD_T_BOOL || t[0] != MOD_T_BOOL || (want == 2 && t[1] != MOD_T_BOOL))
                return "logic is not bool on bools";
            break;
        case MOD_WHERE:
            if (t[0] != MOD_T_BOOL || t[1] != n->type || t[2] != n->type)
                return "a where's condition is not a bool or its branches are not of its type";
            break;
        }
        for (int j = 0; j < i; j++) {
            const mod_node *o = &m->nodes[j];
            if (o->op == n->op && o->type == n->type && o->a == n->a && o->b == n->b && o->c == n->c &&
                o->arg == n->arg && memcmp(&o->value, &n->value, sizeof n->value) == 0)
                return "two nodes are alike (hash-consing missed one)";
        }
    }
    if (m->score >= 0 && m->nodes[m->score].type != MOD_T_FLOAT)
        return "the score is not a float";
    if (m->mask >= 0 && m->nodes[m->mask].type != MOD_T_BOOL)
        return "the mask is not a bool";
    unsigned char seen[MOD_MAX_NODES] = {0};
    if (m->mask >= 0 && mod_tree_reaches_arg(m, m->mask, MOD_ARG_S, seen))
        return "the mask reads s";
    unsigned char reached[MOD_MAX_NODES] = {0};
    mod_tree_mark(m, m->score, reached);
    mod_tree_mark(m, m->mask, reached);
    for (int i = 0; i < m->n_nodes; i++)
        if (!reached[i])
            return "a node is reached from no result (dead code kept)";
    return NULL;
}

#endif
