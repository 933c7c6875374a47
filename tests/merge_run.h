/* merge_run.h: one fg_merge_states call set up, run and judged against the merge computed in double on the
 * host (merge_run.c), for test_gpu_merge and test_gpu_alloc_failures. States hold N(0,1)-ish values with LSEs
 * in [-3, 3], some of them empty (LSE -inf, O NaN: never read); outputs are NaN-poisoned with guard bands. */
#ifndef FG_TESTS_MERGE_RUN_H
#define FG_TESTS_MERGE_RUN_H

#include "tests/gpu_harness.h"

typedef struct merge_bufs {
    dbuf os, ls;    /* the states: o_states [S, T, H, D], lse_states [S, T, H] */
    dbuf o, l;      /* the outputs: O [T, H, D], LSE [T, H], with guard bands */
    fg_merge_args a; /* what fg_merge_states receives */
} merge_bufs;

/* States [S, T, H, D] of dtype `in` (o_states padded per token when strided), uploaded, and outputs of dtype
 * `out`; state s of token t is empty when (s + 2t) % 5 == 4, and token 3 has no state at all. */
void merge_setup(gpu_env *env, merge_bufs *m, int S, int T, int H, int D, fg_dtype in, fg_dtype out, int strided);
/* Poisons the outputs, merges on the stream (the test fails unless FG_OK), waits, downloads O and LSE and
 * checks their guard bands. */
void merge_run(gpu_env *env, merge_bufs *m);
/* Every downloaded element of O and LSE against the merge in double; outputs rounded to their dtype may be
 * off by one unit. */
void merge_verify(const merge_bufs *m);
/* Releases every buffer of m. */
void merge_free(gpu_env *env, merge_bufs *m);

#endif
