/* test_gpu_merge.c: fg_merge_states on the GPU against the merge computed in double on the host: every
 * output element and LSE, states given in fp32, fp16 or bf16 and merged into each of them, empty states
 * (LSE -inf, O NaN: never read), rows whose every state is empty (O = 0, LSE = -inf), strided states, up
 * to 256 states; and the merge of two states bitwise the same in either order. The states, the call and the
 * judgement are tests/merge_run.c's. */
#include <stdlib.h>
#include <string.h>
#include "tests/merge_run.h"

/* One merge set up, run, judged and freed. */
static void merge_case(gpu_env *env, int S, int T, int H, int D, fg_dtype in, fg_dtype out, int strided) {
    merge_bufs m;
    merge_setup(env, &m, S, T, H, D, in, out, strided);
    merge_run(env, &m);
    merge_verify(&m);
    merge_free(env, &m);
}

Test(merge, exact_for_every_dtype_pair) {
    gpu_env env;
    gpu_open(&env);
    static const fg_dtype dts[3] = {FG_DTYPE_F32, FG_DTYPE_F16, FG_DTYPE_BF16};
    static const int states[] = {1, 2, 3, 17};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (size_t k = 0; k < NELEM(states); k++)
                merge_case(&env, states[k], 11, 3, k % 2 ? 72 : 128, dts[i], dts[j], (int)(k % 2));
    merge_case(&env, 256, 5, 2, 512, FG_DTYPE_F32, FG_DTYPE_BF16, 1); /* the most states, wide heads */
    gpu_close(&env);
}

/* merge(a, b) == merge(b, a), bit for bit, O and LSE. */
Test(merge, two_states_in_either_order) {
    gpu_env env;
    gpu_open(&env);
    merge_bufs m;
    merge_setup(&env, &m, 2, 64, 4, 128, FG_DTYPE_F32, FG_DTYPE_F32, 0);
    merge_run(&env, &m);
    const size_t obytes = (size_t)m.o.span * 4, lbytes = (size_t)m.l.span * 4;
    unsigned char *o1 = malloc(obytes), *l1 = malloc(lbytes);
    cr_assert(o1 && l1);
    memcpy(o1, m.o.img, obytes), memcpy(l1, m.l.img, lbytes);
    /* swap the two states in memory and merge again */
    const size_t os1 = (size_t)m.os.view.stride[0] * 4, ls1 = (size_t)m.ls.view.stride[0] * 4;
    unsigned char *tmp = malloc(os1 > ls1 ? os1 : ls1);
    cr_assert(tmp);
    memcpy(tmp, m.os.img, os1), memmove(m.os.img, m.os.img + os1, os1), memcpy(m.os.img + os1, tmp, os1);
    memcpy(tmp, m.ls.img, ls1), memmove(m.ls.img, m.ls.img + ls1, ls1), memcpy(m.ls.img + ls1, tmp, ls1);
    CK(env.cu->cuMemcpyHtoD(m.os.dptr, m.os.img, 2 * os1));
    CK(env.cu->cuMemcpyHtoD(m.ls.dptr, m.ls.img, 2 * ls1));
    merge_run(&env, &m);
    cr_assert(memcmp(o1, m.o.img, obytes) == 0, "O depends on the order of the two states");
    cr_assert(memcmp(l1, m.l.img, lbytes) == 0, "LSE depends on the order of the two states");
    free(o1), free(l1), free(tmp);
    merge_free(&env, &m);
    gpu_close(&env);
}

Test(merge, refuses_bad_arguments) {
    gpu_env env;
    gpu_open(&env);
    merge_bufs m;
    merge_setup(&env, &m, 2, 4, 2, 64, FG_DTYPE_F32, FG_DTYPE_F32, 0);
    fg_merge_args a = m.a;
    a.struct_size = 0;
    cr_assert_eq(fg_merge_states(env.ctx, &a, env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "fg_merge_args_init"), "%s", fg_last_error(env.ctx));
    a = m.a;
    a.lse_states.shape[2] = 3;
    cr_assert_eq(fg_merge_states(env.ctx, &a, env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "lse_states"), "%s", fg_last_error(env.ctx));
    a = m.a;
    a.o = m.a.o_states; /* an output over the states */
    a.o.ndim = 3, a.o.shape[0] = 4, a.o.shape[1] = 2, a.o.shape[2] = 64, a.o.stride[0] = 128, a.o.stride[1] = 64, a.o.stride[2] = 1;
    cr_assert_eq(fg_merge_states(env.ctx, &a, env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "overlaps"), "%s", fg_last_error(env.ctx));
    merge_free(&env, &m);
    gpu_close(&env);
}
