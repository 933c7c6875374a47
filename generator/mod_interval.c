/* mod_interval.c: a mask mod over a block of positions at once (mod.h's mod_mask_block), by the interval
 * arithmetic of templates/common/mod_interval.h, node by node: the same functions the kernels' fg_user_mask_block
 * calls (mod_emit.c), so what this file's tests find sound holds on the device too. */
#include <math.h>

#include "generator/mod.h"
#include "templates/common/mod_interval.h"

_Static_assert((int)MOD_BLOCK_HIDDEN == (int)FG_IV_HIDDEN && (int)MOD_BLOCK_KEPT == (int)FG_IV_KEPT && (int)MOD_BLOCK_MIXED == (int)FG_IV_MIXED,
               "mod.h's block verdicts are mod_interval.h's");
_Static_assert((int)(MOD_NE - MOD_EQ) == (int)FG_IV_NE && (int)(MOD_GE - MOD_EQ) == (int)FG_IV_GE, "comparisons in mod_op's order");

int mod_mask_block(const fg_mod *m, const mod_block *blk) {
    if (m->mask < 0) return MOD_BLOCK_KEPT;
    fg_iv v[MOD_MAX_NODES];
    for (int i = 0; i <= m->mask; i++) {
        const mod_node *n = &m->nodes[i];
        const fg_iv zero = fg_iv_const(0);
        const fg_iv a = n->a >= 0 ? v[n->a] : zero, b = n->b >= 0 ? v[n->b] : zero, c = n->c >= 0 ? v[n->c] : zero;
        const int is_f = n->type == MOD_T_FLOAT;
        fg_iv r = fg_iv_any(is_f);
        switch ((mod_op)n->op) {
        case MOD_CONST: r = fg_iv_const(n->value); break;
        case MOD_ARG:
            if (n->arg == MOD_ARG_B) r = fg_iv_const(blk->b);
            else if (n->arg == MOD_ARG_H) r = fg_iv_range(blk->h_lo, blk->h_hi);
            else if (n->arg == MOD_ARG_Q) r = fg_iv_range(blk->q_lo, blk->q_hi);
            else if (n->arg == MOD_ARG_KV) r = fg_iv_range(blk->kv_lo, blk->kv_hi);
            break; /* s: a mask has none, but a tree may still hold it */
        case MOD_LOAD: r = fg_iv_load(is_f); break;
        case MOD_NEG: r = fg_iv_neg(a, is_f); break;
        case MOD_ADD: r = fg_iv_add(a, b, is_f); break;
        case MOD_SUB: r = fg_iv_sub(a, b, is_f); break;
        case MOD_MUL: r = fg_iv_mul(a, b, is_f); break;
        case MOD_DIV: r = fg_iv_div(a, b); break;
        case MOD_IDIV: r = fg_iv_idiv(a, b); break;
        case MOD_MOD: r = fg_iv_mod(a, b); break;
        case MOD_MIN: r = fg_iv_min(a, b); break;
        case MOD_MAX: r = fg_iv_max(a, b); break;
        case MOD_ABS: r = fg_iv_abs(a, is_f); break;
        case MOD_EXP: r = fg_iv_exp(a); break;
        case MOD_LOG: r = fg_iv_log(a); break;
        case MOD_TANH: r = fg_iv_tanh(a); break;
        case MOD_SQRT: r = fg_iv_sqrt(a); break;
        case MOD_FLOAT: r = fg_iv_to_float(a); break;
        case MOD_FLOOR: r = fg_iv_floor(a); break;
        case MOD_EQ: case MOD_NE: case MOD_LT: case MOD_LE: case MOD_GT: case MOD_GE:
            r = fg_iv_cmp(n->op - MOD_EQ, a, b, m->nodes[n->a].type == MOD_T_FLOAT);
            break;
        case MOD_AND: r = fg_iv_and(a, b); break;
        case MOD_OR: r = fg_iv_or(a, b); break;
        case MOD_NOT: r = fg_iv_not(a); break;
        case MOD_WHERE: r = fg_iv_where(a, b, c); break;
        case MOD_OP_COUNT: break;
        }
        v[i] = r;
    }
    return fg_iv_verdict(v[m->mask]);
}
