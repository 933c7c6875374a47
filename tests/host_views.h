/* host_views.h: fg_tensor views of made-up addresses for the CPU-side tests of call rules (no memory behind
 * them: the rules read shapes, strides and pointer values only). */
#ifndef FG_TESTS_HOST_VIEWS_H
#define FG_TESTS_HOST_VIEWS_H

#include <stdint.h>
#include "include/flashgen.h"

#define ADDR(x) ((void *)(uintptr_t)(x))

/* A contiguous [a, b, c] view at addr. */
static inline fg_tensor t3(fg_dtype dt, int64_t a, int64_t b, int64_t c, uintptr_t addr) {
    fg_tensor t = {ADDR(addr), dt, 3, {a, b, c, 0}, {b * c, c, 1, 0}};
    return t;
}

/* A contiguous [a, b, c, d] view at addr. */
static inline fg_tensor t4(fg_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d, uintptr_t addr) {
    fg_tensor t = {ADDR(addr), dt, 4, {a, b, c, d}, {b * c * d, c * d, d, 1}};
    return t;
}

#endif
