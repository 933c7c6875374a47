/* test_gpu_merge.c: fg_merge_states on the GPU against the merge computed in double on the host: every
 * output element and LSE, states given in fp32, fp16 or bf16 and merged into each of them, empty states
 * (LSE -inf, O NaN: never read), rows whose every state is empty (O = 0, LSE = -inf), strided states, up
 * to 256 states; and the merge of two states bitwise the same in either order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "tests/gpu_harness.h"

static double elem(const dbuf *b, int64_t off) {
    if (b->view.dtype == FG_DTYPE_F32) return ((const float *)b->img)[off];
    return ref_to_float(b->view.dtype, ((const uint16_t *)b->img)[off]);
}

static void set_elem(dbuf *b, int64_t off, float x) {
    if (b->view.dtype == FG_DTYPE_F32) ((float *)b->img)[off] = x;
    else ((uint16_t *)b->img)[off] = ref_from_float(b->view.dtype, x);
}

typedef struct merge_bufs {
    dbuf os, ls, o, l;
    fg_merge_args a;
} merge_bufs;

/* States [S, T, H, D] (o_states padded per token when strided) filled with N(0,1)-ish values, LSEs in
 * [-3, 3]; state s of token t is empty (LSE -inf, O NaN) when (s + 2t) % 5 == 4; token 3 has no state. */
static void merge_setup(gpu_env *env, merge_bufs *m, int S, int T, int H, int D, fg_dtype in, fg_dtype out,
                        int strided) {
    memset(m, 0, sizeof *m);
    int64_t os[4] = {S, T, H, D}, ost[4] = {(int64_t)T * (H * D + 8 * strided), H * D + 8 * strided, D, 1};
    int64_t ls[3] = {S, T, H}, lst[3] = {(int64_t)T * H * (1 + strided), H * (1 + strided), 1};
    dbuf_init(env, &m->os, in, 4, os, ost, 0, 0);
    dbuf_init(env, &m->ls, FG_DTYPE_F32, 3, ls, lst, 0, 0);
    int64_t o3[3] = {T, H, D}, l2[2] = {T, H};
    dbuf_init(env, &m->o, out, 3, o3, NULL, GUARD, 0);
    dbuf_init(env, &m->l, FG_DTYPE_F32, 2, l2, NULL, GUARD, 0);
    memset(m->os.img, 0xFF, (size_t)m->os.span * m->os.esize);
    memset(m->ls.img, 0xFF, (size_t)m->ls.span * m->ls.esize);
    uint64_t x = 12345;
    for (int s = 0; s < S; s++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const int empty = (s + 2 * t) % 5 == 4 || t == 3;
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                const float lse = empty ? -INFINITY : (float)((double)(x >> 40) / (double)(1 << 24) * 6.0 - 3.0);
                ((float *)m->ls.img)[s * lst[0] + t * lst[1] + h] = lse;
                for (int d = 0; d < D; d++) {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    if (!empty) set_elem(&m->os, s * ost[0] + t * ost[1] + h * ost[2] + d,
                                         (float)((double)(x >> 40) / (double)(1 << 24) * 4.0 - 2.0));
                }
            }
    CK(env->cu->cuMemcpyHtoD(m->os.dptr, m->os.img, (size_t)m->os.span * m->os.esize));
    CK(env->cu->cuMemcpyHtoD(m->ls.dptr, m->ls.img, (size_t)m->ls.span * m->ls.esize));
    fg_merge_args_init(&m->a);
    m->a.o_states = m->os.view, m->a.lse_states = m->ls.view, m->a.o = m->o.view, m->a.lse = m->l.view;
}

static void merge_run(gpu_env *env, merge_bufs *m) {
    dbuf_poison(env, &m->o);
    dbuf_poison(env, &m->l);
    cr_assert_eq(fg_merge_states(env->ctx, &m->a, env->stream), FG_OK, "%s", fg_last_error(env->ctx));
    CK(env->cu->cuStreamSynchronize(env->stream));
    dbuf_download(env, &m->o);
    dbuf_download(env, &m->l);
    check_guard(&m->o, "o");
    check_guard(&m->l, "lse");
}

/* Every element against the merge in double; outputs rounded to their dtype may be off by one unit. */
static void merge_verify(const merge_bufs *m) {
    const fg_tensor *os = &m->os.view, *ls = &m->ls.view;
    const int64_t S = os->shape[0], T = os->shape[1], H = os->shape[2], D = os->shape[3];
    const double unit = m->o.view.dtype == FG_DTYPE_F32 ? 1e-6 : m->o.view.dtype == FG_DTYPE_BF16 ? 1.0 / 128 : 1.0 / 1024;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            double mx = -INFINITY;
            for (int64_t s = 0; s < S; s++) mx = fmax(mx, ((const float *)m->ls.img)[s * ls->stride[0] + t * ls->stride[1] + h]);
            double sum = 0;
            for (int64_t s = 0; s < S; s++) {
                const double l = ((const float *)m->ls.img)[s * ls->stride[0] + t * ls->stride[1] + h];
                sum += mx == -INFINITY ? 0 : exp(l - mx);
            }
            const double lse_ref = sum > 0 ? mx + log(sum) : -INFINITY;
            const double lse = ((const float *)m->l.img)[t * H + h];
            if (lse_ref == -INFINITY) cr_assert(lse == -INFINITY, "token %lld head %lld: lse %g, not -inf", (long long)t, (long long)h, lse);
            else cr_assert(fabs(lse - lse_ref) <= 1e-5 + 1e-6 * fabs(lse_ref), "token %lld head %lld: lse %.9g, want %.9g",
                           (long long)t, (long long)h, lse, lse_ref);
            for (int64_t d = 0; d < D; d++) {
                double ref = 0;
                for (int64_t s = 0; s < S; s++) {
                    const double l = ((const float *)m->ls.img)[s * ls->stride[0] + t * ls->stride[1] + h];
                    if (mx == -INFINITY || l == -INFINITY) continue;
                    ref += exp(l - mx) / sum * elem(&m->os, s * os->stride[0] + t * os->stride[1] + h * os->stride[2] + d);
                }
                const double out = elem(&m->o, (t * H + h) * D + d);
                cr_assert(fabs(out - ref) <= unit * fmax(fabs(ref), 1e-3) + 2e-6, "token %lld head %lld dim %lld: %.9g, want %.9g",
                          (long long)t, (long long)h, (long long)d, out, ref);
            }
        }
}

static void merge_free(gpu_env *env, merge_bufs *m) {
    dbuf_free(env, &m->os), dbuf_free(env, &m->ls), dbuf_free(env, &m->o), dbuf_free(env, &m->l);
}

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
