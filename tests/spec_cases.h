/* spec_cases.h: the valid specs test_spec.c and test_validate.c start from and break (static inline,
 * included by both). */
#ifndef FLASHGEN_TESTS_SPEC_CASES_H
#define FLASHGEN_TESTS_SPEC_CASES_H
#include "generator/spec.h"

/* A valid spec of the mma.sync family on Hopper (sm_90). */
static inline fg_spec base(void) {
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 0, .dtype = FG_DTYPE_BF16, .head_dim = 128,
                 .block_m = 128, .block_n = 64, .warps = 8, .stages = 2, .causal = 0};
    return s;
}

/* A valid backward spec (the policy's d 128 tile). */
static inline fg_spec bwd_base(void) {
    fg_spec s = {.kind = FG_KIND_BWD, .arch = 90, .arch_accel = 0, .dtype = FG_DTYPE_BF16, .head_dim = 128,
                 .block_m = 32, .block_n = 64, .warps = 4, .stages = 2, .causal = 1, .deterministic = 1};
    return s;
}

/* A valid spec of the wgmma family (sm_90a): two consumer warpgroups of 64 rows plus the producer's. */
static inline fg_spec wg_base(void) {
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128,
                 .block_m = 128, .block_n = 128, .warps = 12, .stages = 2, .causal = 0};
    return s;
}

#endif
