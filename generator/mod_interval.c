/* mod_interval.c: a mask mod over a block of positions at once (mod.h's mod_mask_block), by interval arithmetic on
 * the tree: every node's value over the block is bounded (an int interval, a float interval with a flag for a
 * possible NaN, the set of values a bool can take) and so is whether it can go bad. The answer is sound: HIDDEN
 * only when every position is hidden and none can go bad, KEPT only when every position is kept and none can go
 * bad; anything an interval cannot settle (an aux array's values, a divisor that may be 0) is MIXED, which asks
 * the kernel to evaluate the positions one by one. */
#include <math.h>
#include <stdint.h>

#include "generator/mod.h"

enum { CAN_FALSE = 1, CAN_TRUE = 2 };

typedef struct ival {
    double lo, hi;    /* ints and floats: the bounds (ints exact in a double) */
    unsigned char nan; /* floats: may be NaN */
    unsigned char set; /* bools: CAN_FALSE | CAN_TRUE */
    unsigned char bad; /* may go bad (mod.h: an out-of-range load, an int division by zero, a floor out of range) */
} ival;

static const double INT_LO = -2147483648.0, INT_HI = 2147483647.0;

static ival any_int(void) { return (ival){INT_LO, INT_HI, 0, 0, 0}; }
static ival any_float(void) { return (ival){-INFINITY, INFINITY, 1, 0, 0}; }
static ival point(double v) { return (ival){v, v, 0, 0, 0}; }

/* An int result: the exact interval when it stays in int32 (ints wrap past it: then anything). */
static ival int_result(double lo, double hi) {
    if (lo < INT_LO || hi > INT_HI) return any_int();
    return (ival){lo, hi, 0, 0, 0};
}

static double min4(double a, double b, double c, double d) { return fmin(fmin(a, b), fmin(c, d)); }
static double max4(double a, double b, double c, double d) { return fmax(fmax(a, b), fmax(c, d)); }

/* The interval of a monotonic float function f over x (increasing: f(lo) .. f(hi)). */
static ival mono(double (*f)(double), ival x) {
    ival r = {f(x.lo), f(x.hi), x.nan, 0, 0};
    if (isnan(r.lo) || isnan(r.hi)) return any_float();
    return r;
}

static ival compare(int op, ival a, ival b) {
    ival r = {0, 0, 0, 0, 0};
    int t = 0, f = 0; /* can it be true, can it be false */
    switch (op) {
    case MOD_EQ: t = a.lo <= b.hi && b.lo <= a.hi; f = !(a.lo == a.hi && b.lo == b.hi && a.lo == b.lo); break;
    case MOD_NE: f = a.lo <= b.hi && b.lo <= a.hi; t = !(a.lo == a.hi && b.lo == b.hi && a.lo == b.lo); break;
    case MOD_LT: t = a.lo < b.hi; f = a.hi >= b.lo; break;
    case MOD_LE: t = a.lo <= b.hi; f = a.hi > b.lo; break;
    case MOD_GT: t = a.hi > b.lo; f = a.lo <= b.hi; break;
    case MOD_GE: t = a.hi >= b.lo; f = a.lo < b.hi; break;
    }
    if (a.nan || b.nan) f = 1, t |= op == MOD_NE; /* a NaN compares false (and != true) */
    r.set = (unsigned char)((t ? CAN_TRUE : 0) | (f ? CAN_FALSE : 0));
    return r;
}

int mod_mask_block(const fg_mod *m, const mod_block *blk) {
    if (m->mask < 0) return MOD_BLOCK_KEPT;
    ival v[MOD_MAX_NODES];
    for (int i = 0; i <= m->mask; i++) {
        const mod_node *n = &m->nodes[i];
        const ival a = n->a >= 0 ? v[n->a] : point(0), b = n->b >= 0 ? v[n->b] : point(0), c = n->c >= 0 ? v[n->c] : point(0);
        const int is_f = n->type == MOD_T_FLOAT;
        ival r = is_f ? any_float() : any_int();
        switch ((mod_op)n->op) {
        case MOD_CONST: r = point(n->value); break;
        case MOD_ARG:
            if (n->arg == MOD_ARG_B) r = point(blk->b);
            else if (n->arg == MOD_ARG_H) r = point(blk->h);
            else if (n->arg == MOD_ARG_Q) r = (ival){blk->q_lo, blk->q_hi, 0, 0, 0};
            else if (n->arg == MOD_ARG_KV) r = (ival){blk->kv_lo, blk->kv_hi, 0, 0, 0};
            else r = any_float(); /* s: a mask has none, but a tree may still hold it */
            break;
        case MOD_LOAD: r = is_f ? any_float() : any_int(); r.bad = 1; break; /* the array's values: unknown */
        case MOD_NEG: r = is_f ? (ival){-a.hi, -a.lo, a.nan, 0, 0} : int_result(-a.hi, -a.lo); break;
        case MOD_ADD: r = is_f ? (ival){a.lo + b.lo, a.hi + b.hi, 1, 0, 0} : int_result(a.lo + b.lo, a.hi + b.hi); break;
        case MOD_SUB: r = is_f ? (ival){a.lo - b.hi, a.hi - b.lo, 1, 0, 0} : int_result(a.lo - b.hi, a.hi - b.lo); break;
        case MOD_MUL:
            if (is_f && !(isfinite(a.lo) && isfinite(a.hi) && isfinite(b.lo) && isfinite(b.hi))) r = any_float();
            else if (is_f) r = (ival){min4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi),
                                      max4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi), (unsigned char)(a.nan || b.nan), 0, 0};
            else r = int_result(min4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi),
                                max4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi));
            break;
        case MOD_DIV: /* finite bounds and a divisor of one sign: the corners */
            if (isfinite(a.lo) && isfinite(a.hi) && isfinite(b.lo) && isfinite(b.hi) && (b.lo > 0 || b.hi < 0))
                r = (ival){min4(a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi),
                           max4(a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi), (unsigned char)(a.nan || b.nan), 0, 0};
            break;
        case MOD_IDIV:
            if (b.lo > 0 || b.hi < 0) { /* floor(a / b) is monotonic in each of a and b on a divisor of one sign */
                const double q1 = floor(a.lo / b.lo), q2 = floor(a.lo / b.hi), q3 = floor(a.hi / b.lo), q4 = floor(a.hi / b.hi);
                r = int_result(min4(q1, q2, q3, q4), max4(q1, q2, q3, q4));
            } else {
                r = any_int(), r.bad = 1; /* a divisor that may be 0 */
            }
            break;
        case MOD_MOD:
            if (b.lo > 0) r = (a.lo >= 0 && a.hi < b.lo) ? a : int_result(0, b.hi - 1); /* the divisor's sign */
            else if (b.hi < 0) r = (a.hi <= 0 && a.lo > b.hi) ? a : int_result(b.lo + 1, 0);
            else r = any_int(), r.bad = 1;
            break;
        case MOD_MIN: r = (ival){fmin(a.lo, b.lo), fmin(a.hi, b.hi), (unsigned char)(a.nan && b.nan), 0, 0}; break;
        case MOD_MAX: r = (ival){fmax(a.lo, b.lo), fmax(a.hi, b.hi), (unsigned char)(a.nan && b.nan), 0, 0}; break;
        case MOD_ABS: {
            const double lo = a.lo >= 0 ? a.lo : a.hi <= 0 ? -a.hi : 0, hi = fmax(fabs(a.lo), fabs(a.hi));
            r = is_f ? (ival){lo, hi, a.nan, 0, 0} : int_result(lo, hi);
            break;
        }
        case MOD_EXP: r = mono(exp, a); break;
        case MOD_LOG: r = a.lo >= 0 ? mono(log, a) : any_float(); break;
        case MOD_TANH: r = mono(tanh, a); break;
        case MOD_SQRT: r = a.lo >= 0 ? mono(sqrt, a) : any_float(); break;
        case MOD_FLOAT: r = (ival){a.lo, a.hi, 0, 0, 0}; break; /* fp32 rounding keeps the order */
        case MOD_FLOOR:
            if (!a.nan && a.lo >= INT_LO && a.hi <= INT_HI) r = (ival){floor(a.lo), floor(a.hi), 0, 0, 0};
            else r = any_int(), r.bad = 1;
            break;
        case MOD_EQ: case MOD_NE: case MOD_LT: case MOD_LE: case MOD_GT: case MOD_GE: r = compare(n->op, a, b); break;
        case MOD_AND:
            r.set = (unsigned char)(((a.set & CAN_TRUE) && (b.set & CAN_TRUE) ? CAN_TRUE : 0) |
                                    ((a.set & CAN_FALSE) || (b.set & CAN_FALSE) ? CAN_FALSE : 0));
            break;
        case MOD_OR:
            r.set = (unsigned char)(((a.set & CAN_TRUE) || (b.set & CAN_TRUE) ? CAN_TRUE : 0) |
                                    ((a.set & CAN_FALSE) && (b.set & CAN_FALSE) ? CAN_FALSE : 0));
            break;
        case MOD_NOT: r.set = (unsigned char)(((a.set & CAN_TRUE) ? CAN_FALSE : 0) | ((a.set & CAN_FALSE) ? CAN_TRUE : 0)); break;
        case MOD_WHERE:
            if (a.set == CAN_TRUE) r = b;
            else if (a.set == CAN_FALSE) r = c;
            else r = (ival){fmin(b.lo, c.lo), fmax(b.hi, c.hi), (unsigned char)(b.nan || c.nan), (unsigned char)(b.set | c.set),
                            (unsigned char)(b.bad || c.bad)};
            break;
        case MOD_OP_COUNT: break;
        }
        /* bad from the operands: a where only through its chosen branches (mod.c), the rest through all of them */
        if (n->op == MOD_WHERE) r.bad = (unsigned char)(a.bad || (a.set & CAN_TRUE ? b.bad : 0) || (a.set & CAN_FALSE ? c.bad : 0));
        else r.bad = (unsigned char)(r.bad || (n->a >= 0 && a.bad) || (n->b >= 0 && b.bad) || (n->c >= 0 && c.bad));
        v[i] = r;
    }
    const ival root = v[m->mask];
    if (root.bad) return MOD_BLOCK_MIXED;
    if (root.set == CAN_TRUE) return MOD_BLOCK_KEPT;
    if (root.set == CAN_FALSE) return MOD_BLOCK_HIDDEN;
    return MOD_BLOCK_MIXED;
}
