/* merge_run.c: one fg_merge_states call set up, run and judged against the merge in double (merge_run.h). */
#include <math.h>
#include <string.h>
#include "reference/reference.h"
#include "tests/merge_run.h"

/* Element off of a state or output's host image, as a double. */
static double elem(const dbuf *b, int64_t off) {
    if (b->view.dtype == FG_DTYPE_F32) return ((const float *)b->img)[off];
    return ref_to_float(b->view.dtype, ((const uint16_t *)b->img)[off]);
}

/* Writes x, rounded to the buffer's dtype, at element off of its host image. */
static void set_elem(dbuf *b, int64_t off, float x) {
    if (b->view.dtype == FG_DTYPE_F32) ((float *)b->img)[off] = x;
    else ((uint16_t *)b->img)[off] = ref_from_float(b->view.dtype, x);
}

/* States [S, T, H, D] (o_states padded per token when strided) filled with N(0,1)-ish values, LSEs in
 * [-3, 3]; state s of token t is empty (LSE -inf, O NaN) when (s + 2t) % 5 == 4; token 3 has no state.
 * (Contracts of this file's functions: merge_run.h.) */
void merge_setup(gpu_env *env, merge_bufs *m, int S, int T, int H, int D, fg_dtype in, fg_dtype out, int strided) {
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

/* Poisons the outputs, merges on the stream, waits, downloads O and LSE and checks their guard bands. */
void merge_run(gpu_env *env, merge_bufs *m) {
    dbuf_poison(env, &m->o);
    dbuf_poison(env, &m->l);
    gpu_poison_shared(env); /* and waits: the poison went through the legacy stream; the merge runs on another */
    cr_assert_eq(fg_merge_states(env->ctx, &m->a, env->stream), FG_OK, "%s", fg_last_error(env->ctx));
    CK(env->cu->cuStreamSynchronize(env->stream));
    dbuf_download(env, &m->o);
    dbuf_download(env, &m->l);
    check_guard(&m->o, "o");
    check_guard(&m->l, "lse");
}

/* Every element against the merge in double; outputs rounded to their dtype may be off by one unit. */
void merge_verify(const merge_bufs *m) {
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

/* Releases every buffer of m. */
void merge_free(gpu_env *env, merge_bufs *m) {
    dbuf_free(env, &m->os), dbuf_free(env, &m->ls), dbuf_free(env, &m->o), dbuf_free(env, &m->l);
}
