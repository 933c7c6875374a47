/* mod_interval.h: interval arithmetic over a custom mod's tree (generator/mod.h), one operator at a time: every
 * node's value over a block of positions is bounded (ints and floats by [lo, hi] with a flag for a possible NaN,
 * bools by the set of values they can take) and so is whether it can go bad (mod.h: an out-of-range load, an int
 * division by zero, a floor out of range). The one definition serves the generator, whose mod_mask_block walks a
 * tree through these functions, and the kernels, where mod_emit writes fg_user_mask_block as one call a node: so
 * the host's soundness tests cover the kernels' block classification.
 * Sound for the kernels' fp32 evaluation too: the bounds are fp64 over exact arithmetic, and a comparison of
 * floats is decided only outside a relative margin of 2^-20 around them (fp32 rounds each operation by 2^-24).
 * Plain C that NVRTC also compiles (no header on the device; doubles, whose fmin/fmax/floor/exp/log/tanh/sqrt it
 * has built in). */
#ifndef FG_MOD_INTERVAL_H
#define FG_MOD_INTERVAL_H

#if defined(__CUDACC__)
#define FG_IV_FN static __device__ __forceinline__
#define FG_IV_INF __longlong_as_double(0x7ff0000000000000ll)
#else /* the host file that includes this includes <math.h> first (templates include no system header) */
#define FG_IV_FN static inline
#define FG_IV_INF HUGE_VAL
#endif

enum { FG_IV_FALSE = 1, FG_IV_TRUE = 2 };                /* a bool's possible values (fg_iv.set) */
enum { FG_IV_HIDDEN = 0, FG_IV_KEPT = 1, FG_IV_MIXED = 2 }; /* a mask over a block (fg_iv_verdict) */
enum { FG_IV_EQ = 0, FG_IV_NE, FG_IV_LT, FG_IV_LE, FG_IV_GT, FG_IV_GE }; /* comparisons, mod_op's order */

typedef struct fg_iv {
    double lo, hi; /* ints and floats: the bounds (ints exact in a double) */
    int nan;       /* floats: may be NaN */
    int set;       /* bools: FG_IV_FALSE | FG_IV_TRUE */
    int bad;       /* may go bad */
} fg_iv;

#define FG_IV_INT_LO (-2147483648.0)
#define FG_IV_INT_HI 2147483647.0

FG_IV_FN fg_iv fg_iv_make(double lo, double hi, int nan, int set, int bad) {
    fg_iv r;
    r.lo = lo, r.hi = hi, r.nan = nan, r.set = set, r.bad = bad;
    return r;
}
FG_IV_FN fg_iv fg_iv_any(int is_f) { return is_f ? fg_iv_make(-FG_IV_INF, FG_IV_INF, 1, 0, 0) : fg_iv_make(FG_IV_INT_LO, FG_IV_INT_HI, 0, 0, 0); }
FG_IV_FN fg_iv fg_iv_range(double lo, double hi) { return fg_iv_make(lo, hi, 0, 0, 0); }
FG_IV_FN int fg_iv_finite(double x) { return x - x == 0.0; }
FG_IV_FN double fg_iv_min4(double a, double b, double c, double d) { return fmin(fmin(a, b), fmin(c, d)); }
FG_IV_FN double fg_iv_max4(double a, double b, double c, double d) { return fmax(fmax(a, b), fmax(c, d)); }

/* An int result: the exact interval when it stays in int32 (ints wrap past it: then anything). Bad from the
 * operands (bad: theirs, or'ed). */
FG_IV_FN fg_iv fg_iv_int(double lo, double hi, int bad) {
    fg_iv r = (lo < FG_IV_INT_LO || hi > FG_IV_INT_HI) ? fg_iv_any(0) : fg_iv_range(lo, hi);
    r.bad = bad;
    return r;
}
/* A float result: anything when a bound is NaN. */
FG_IV_FN fg_iv fg_iv_float(double lo, double hi, int nan, int bad) {
    fg_iv r = (lo != lo || hi != hi) ? fg_iv_any(1) : fg_iv_make(lo, hi, nan, 0, 0);
    r.bad = bad;
    return r;
}

/* The leaves: a constant, a position argument over [lo, hi], the score s (anything), an aux load (its values
 * unknown, and it may go bad). */
FG_IV_FN fg_iv fg_iv_const(double v) { return fg_iv_range(v, v); }
FG_IV_FN fg_iv fg_iv_load(int is_f) {
    fg_iv r = fg_iv_any(is_f);
    r.bad = 1;
    return r;
}

FG_IV_FN fg_iv fg_iv_neg(fg_iv a, int is_f) {
    return is_f ? fg_iv_float(-a.hi, -a.lo, a.nan, a.bad) : fg_iv_int(-a.hi, -a.lo, a.bad);
}
FG_IV_FN fg_iv fg_iv_add(fg_iv a, fg_iv b, int is_f) {
    return is_f ? fg_iv_float(a.lo + b.lo, a.hi + b.hi, 1, a.bad | b.bad) : fg_iv_int(a.lo + b.lo, a.hi + b.hi, a.bad | b.bad);
}
FG_IV_FN fg_iv fg_iv_sub(fg_iv a, fg_iv b, int is_f) {
    return is_f ? fg_iv_float(a.lo - b.hi, a.hi - b.lo, 1, a.bad | b.bad) : fg_iv_int(a.lo - b.hi, a.hi - b.lo, a.bad | b.bad);
}
FG_IV_FN fg_iv fg_iv_mul(fg_iv a, fg_iv b, int is_f) {
    const int bad = a.bad | b.bad;
    if (is_f && !(fg_iv_finite(a.lo) && fg_iv_finite(a.hi) && fg_iv_finite(b.lo) && fg_iv_finite(b.hi))) {
        fg_iv r = fg_iv_any(1);
        r.bad = bad;
        return r;
    }
    const double lo = fg_iv_min4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi);
    const double hi = fg_iv_max4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi);
    return is_f ? fg_iv_float(lo, hi, a.nan | b.nan, bad) : fg_iv_int(lo, hi, bad);
}
/* float division: finite bounds and a divisor of one sign give the corners, else anything */
FG_IV_FN fg_iv fg_iv_div(fg_iv a, fg_iv b) {
    const int bad = a.bad | b.bad;
    if (fg_iv_finite(a.lo) && fg_iv_finite(a.hi) && fg_iv_finite(b.lo) && fg_iv_finite(b.hi) && (b.lo > 0 || b.hi < 0))
        return fg_iv_float(fg_iv_min4(a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi),
                           fg_iv_max4(a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi), a.nan | b.nan, bad);
    fg_iv r = fg_iv_any(1);
    r.bad = bad;
    return r;
}
/* int floor division: monotonic in each operand on a divisor of one sign; a divisor that may be 0 may go bad */
FG_IV_FN fg_iv fg_iv_idiv(fg_iv a, fg_iv b) {
    if (b.lo > 0 || b.hi < 0) {
        const double q1 = floor(a.lo / b.lo), q2 = floor(a.lo / b.hi), q3 = floor(a.hi / b.lo), q4 = floor(a.hi / b.hi);
        return fg_iv_int(fg_iv_min4(q1, q2, q3, q4), fg_iv_max4(q1, q2, q3, q4), a.bad | b.bad);
    }
    return fg_iv_int(FG_IV_INT_LO, FG_IV_INT_HI, 1);
}
/* int modulo with the divisor's sign */
FG_IV_FN fg_iv fg_iv_mod(fg_iv a, fg_iv b) {
    const int bad = a.bad | b.bad;
    if (b.lo > 0) return (a.lo >= 0 && a.hi < b.lo) ? fg_iv_int(a.lo, a.hi, bad) : fg_iv_int(0, b.hi - 1, bad);
    if (b.hi < 0) return (a.hi <= 0 && a.lo > b.hi) ? fg_iv_int(a.lo, a.hi, bad) : fg_iv_int(b.lo + 1, 0, bad);
    return fg_iv_int(FG_IV_INT_LO, FG_IV_INT_HI, 1);
}
/* min and max take a NaN operand's other side (fminf, fmaxf): NaN only when both may be */
FG_IV_FN fg_iv fg_iv_min(fg_iv a, fg_iv b) { return fg_iv_make(fmin(a.lo, b.lo), fmin(a.hi, b.hi), a.nan & b.nan, 0, a.bad | b.bad); }
FG_IV_FN fg_iv fg_iv_max(fg_iv a, fg_iv b) { return fg_iv_make(fmax(a.lo, b.lo), fmax(a.hi, b.hi), a.nan & b.nan, 0, a.bad | b.bad); }
FG_IV_FN fg_iv fg_iv_abs(fg_iv a, int is_f) {
    const double lo = a.lo >= 0 ? a.lo : a.hi <= 0 ? -a.hi : 0, hi = fmax(fabs(a.lo), fabs(a.hi));
    return is_f ? fg_iv_float(lo, hi, a.nan, a.bad) : fg_iv_int(lo, hi, a.bad);
}
/* The increasing float functions: their values at the bounds (log and sqrt only on a non-negative domain). */
FG_IV_FN fg_iv fg_iv_exp(fg_iv a) { return fg_iv_float(exp(a.lo), exp(a.hi), a.nan, a.bad); }
FG_IV_FN fg_iv fg_iv_tanh(fg_iv a) { return fg_iv_float(tanh(a.lo), tanh(a.hi), a.nan, a.bad); }
FG_IV_FN fg_iv fg_iv_log(fg_iv a) {
    if (a.lo >= 0) return fg_iv_float(log(a.lo), log(a.hi), a.nan, a.bad);
    fg_iv r = fg_iv_any(1);
    r.bad = a.bad;
    return r;
}
FG_IV_FN fg_iv fg_iv_sqrt(fg_iv a) {
    if (a.lo >= 0) return fg_iv_float(sqrt(a.lo), sqrt(a.hi), a.nan, a.bad);
    fg_iv r = fg_iv_any(1);
    r.bad = a.bad;
    return r;
}
/* an int as a float: fp32 rounding keeps the order */
FG_IV_FN fg_iv fg_iv_to_float(fg_iv a) { return fg_iv_make(a.lo, a.hi, 0, 0, a.bad); }
/* a float rounded down to an int: out of int32 range or NaN goes bad */
FG_IV_FN fg_iv fg_iv_floor(fg_iv a) {
    if (!a.nan && a.lo >= FG_IV_INT_LO && a.hi <= FG_IV_INT_HI) return fg_iv_make(floor(a.lo), floor(a.hi), 0, 0, a.bad);
    return fg_iv_int(FG_IV_INT_LO, FG_IV_INT_HI, 1);
}

/* A comparison (FG_IV_EQ ..) of operands of one type (is_f: floats, compared outside the fp32 margin). */
FG_IV_FN fg_iv fg_iv_cmp(int op, fg_iv a, fg_iv b, int is_f) {
    if (is_f) { /* widen both by 2^-20 of their magnitude, so that fp32's roundings cannot cross a decision */
        const double e = 9.5367431640625e-07;
        a.lo -= fabs(a.lo) * e + 1e-300, a.hi += fabs(a.hi) * e + 1e-300;
        b.lo -= fabs(b.lo) * e + 1e-300, b.hi += fabs(b.hi) * e + 1e-300;
    }
    const int point = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo, overlap = a.lo <= b.hi && b.lo <= a.hi;
    int t = 0, f = 0; /* can it be true, can it be false */
    switch (op) {
    case FG_IV_EQ: t = overlap, f = !point; break;
    case FG_IV_NE: f = overlap, t = !point; break;
    case FG_IV_LT: t = a.lo < b.hi, f = a.hi >= b.lo; break;
    case FG_IV_LE: t = a.lo <= b.hi, f = a.hi > b.lo; break;
    case FG_IV_GT: t = a.hi > b.lo, f = a.lo <= b.hi; break;
    default: t = a.hi >= b.lo, f = a.lo < b.hi; break;
    }
    if (a.nan || b.nan) f = 1, t |= op == FG_IV_NE; /* a NaN compares false (and != true) */
    return fg_iv_make(0, 0, 0, (t ? FG_IV_TRUE : 0) | (f ? FG_IV_FALSE : 0), a.bad | b.bad);
}
FG_IV_FN fg_iv fg_iv_and(fg_iv a, fg_iv b) {
    return fg_iv_make(0, 0, 0, ((a.set & FG_IV_TRUE) && (b.set & FG_IV_TRUE) ? FG_IV_TRUE : 0) |
                               ((a.set & FG_IV_FALSE) || (b.set & FG_IV_FALSE) ? FG_IV_FALSE : 0), a.bad | b.bad);
}
FG_IV_FN fg_iv fg_iv_or(fg_iv a, fg_iv b) {
    return fg_iv_make(0, 0, 0, ((a.set & FG_IV_TRUE) || (b.set & FG_IV_TRUE) ? FG_IV_TRUE : 0) |
                               ((a.set & FG_IV_FALSE) && (b.set & FG_IV_FALSE) ? FG_IV_FALSE : 0), a.bad | b.bad);
}
FG_IV_FN fg_iv fg_iv_not(fg_iv a) {
    return fg_iv_make(0, 0, 0, ((a.set & FG_IV_TRUE) ? FG_IV_FALSE : 0) | ((a.set & FG_IV_FALSE) ? FG_IV_TRUE : 0), a.bad);
}
/* a where c: the side c settles on, or the union of both; bad through the condition and its chosen sides */
FG_IV_FN fg_iv fg_iv_where(fg_iv c, fg_iv a, fg_iv b) {
    fg_iv r;
    if (c.set == FG_IV_TRUE) r = a;
    else if (c.set == FG_IV_FALSE) r = b;
    else r = fg_iv_make(fmin(a.lo, b.lo), fmax(a.hi, b.hi), a.nan | b.nan, a.set | b.set, 0);
    r.bad = c.bad | ((c.set & FG_IV_TRUE) ? a.bad : 0) | ((c.set & FG_IV_FALSE) ? b.bad : 0);
    return r;
}

/* A mask's verdict over the block from its root: HIDDEN when every position is hidden and none can go bad, KEPT
 * when every one is kept and none can go bad, else MIXED. */
FG_IV_FN int fg_iv_verdict(fg_iv r) {
    if (r.bad) return FG_IV_MIXED;
    if (r.set == FG_IV_TRUE) return FG_IV_KEPT;
    if (r.set == FG_IV_FALSE) return FG_IV_HIDDEN;
    return FG_IV_MIXED;
}

#endif /* FG_MOD_INTERVAL_H */
