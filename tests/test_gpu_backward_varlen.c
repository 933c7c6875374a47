/* test_gpu_backward_varlen.c: the backward of packed sequences (fg_attention_bwd_varlen) on the GPU. The
 * forward of each case runs first (fg_attention_fwd_varlen, judged as in test_gpu_serving), then the backward
 * on a random dO, with NaN-poisoned gradients and guard bands and a NaN-filled workspace; each sequence's
 * dQ, dK and dV are judged against the CPU reference of that sequence alone (ref_check_bwd: the tolerance
 * rule), so a gradient written for the wrong sequence, or leaking across one, fails. Mixed lengths (0, 1, and
 * either side of the kernels' blocks), GQA and MQA, causal and not, cross lengths, head dims of both
 * families and one the kernels pad, strided views, the deterministic mode (bitwise repeatable), and V of a head
 * dim of its own (head_dim_v: DeepSeek's 192/128, narrower and wider V, padded ones). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "runtime/runtime.h"
#include "tests/serving_run.h"
#include "generator/mod.h"

typedef struct vbwd_run {
    dbuf dout, dq, dk, dv;
    CUdeviceptr ws, dsink;   /* dsink: with sinks, fp32 [hq] */
    float dsink_host[256];
    CUdeviceptr aux_grad[FG_MOD_AUX_MAX]; /* the mod's trainable arrays' gradients (mod_aux_grad), 0 for none */
    float *aux_grad_host[FG_MOD_AUX_MAX];
    int64_t aux_elems[FG_MOD_AUX_MAX];
    fg_varlen_bwd_args a;
} vbwd_run;

/* The reference's sums of a mod's trainable arrays' gradients (ref_score_grads' visitor): for each element, the sum
 * of g times the site's partial over the scores whose loads read it, and the sum of their magnitudes. */
typedef struct aux_grad_sums {
    fg_mod tree; /* the mod with its sites' partials (mod_aux_grad) */
    mod_grad_site sites[MOD_MAX_GRAD_SITES];
    int n_sites;
    mod_inputs in;
    double *ref[FG_MOD_AUX_MAX], *mag[FG_MOD_AUX_MAX];
} aux_grad_sums;

static void aux_grad_visit(void *user, int b, int h, int q, int kv, double s, double g) {
    aux_grad_sums *A = user;
    A->in.s = s, A->in.b = b, A->in.h = h, A->in.q = q, A->in.kv = kv;
    for (int k = 0; k < A->n_sites; k++) {
        int64_t at;
        double part;
        if (!mod_eval_site(&A->tree, &A->sites[k], &A->in, &at, &part)) continue;
        const int t = A->tree.nodes[A->sites[k].load].arg;
        A->ref[t][at] += g * part, A->mag[t][at] += fabs(g * part);
    }
}

static serve_case bc(fg_dtype dt, int batch, const int *lq, const int *lk, int hq, int hkv, int d, int causal) {
    serve_case c;
    memset(&c, 0, sizeof c);
    c.dt = dt, c.batch = batch, c.lq = lq, c.lk = lk, c.hq = hq, c.hkv = hkv, c.d = d, c.causal = causal;
    c.k_mode = SERVE_K_PACKED;
    return c;
}

/* The backward's buffers and arguments for the forward run r (its q, k, v, o, lse, lengths). */
static void vbwd_setup(gpu_env *env, serve_run *r, vbwd_run *b, int deterministic) {
    const serve_case *c = &r->c;
    memset(b, 0, sizeof *b);
    dbuf_init(env, &b->dout, c->dt, 3, r->o.view.shape, r->o.view.stride, 0, 0);
    memset(b->dout.img, 0xFF, (size_t)b->dout.span * b->dout.esize); /* padding NaN */
    const fg_tensor dout4 = serve_view4(&b->dout.host);
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_fill_normal(&dout4, (c->seed ? c->seed : 7) + 100, &e), FG_OK, "%s", e.msg);
    if (b->dout.span > 0) CK(env->cu->cuMemcpyHtoD(b->dout.dptr, b->dout.img, (size_t)b->dout.span * b->dout.esize));
    dbuf_init(env, &b->dq, c->dt, 3, r->q.view.shape, r->q.view.stride, 64, 0);
    dbuf_init(env, &b->dk, c->dt, 3, r->k.view.shape, r->k.view.stride, 64, 0);
    dbuf_init(env, &b->dv, c->dt, 3, r->v.view.shape, r->v.view.stride, 64, 0);
    fg_varlen_bwd_args *a = &b->a;
    fg_varlen_bwd_args_init(a);
    a->q = r->q.view, a->k = r->k.view, a->v = r->v.view, a->o = r->o.view, a->lse = r->lse.view;
    a->dout = b->dout.view, a->dq = b->dq.view, a->dk = b->dk.view, a->dv = b->dv.view;
    a->cu_seqlens_q = (const int32_t *)(uintptr_t)r->d_cu_q, a->cu_seqlens_k = (const int32_t *)(uintptr_t)r->d_cu_k;
    a->batch = c->batch, a->max_seqlen_q = r->args.max_seqlen_q;
    for (int i = 0; i < c->batch; i++) a->max_seqlen_k = r->lk[i] > a->max_seqlen_k ? r->lk[i] : a->max_seqlen_k;
    a->causal = c->causal, a->deterministic = deterministic;
    /* the forward's model variants (serving_run.c set them up) */
    a->window = c->window, a->window_left = c->window_left, a->window_right = c->window_right;
    a->causal_top_left = c->causal_top_left, a->softcap = c->softcap;
    a->alibi_slopes = (const float *)(uintptr_t)r->d_slopes, a->sinks = (const float *)(uintptr_t)r->d_sinks;
    a->mod = r->args.mod; /* and its arrays, as the forward had them */
    memcpy(a->mod_aux, r->args.mod_aux, sizeof a->mod_aux);
    if (c->sinks) {
        CK(env->cu->cuMemAlloc(&b->dsink, 256 * sizeof(float)));
        CK(env->cu->cuMemsetD8(b->dsink, 0xFF, 256 * sizeof(float))); /* NaN: the call must write it */
        a->dsink = (float *)(uintptr_t)b->dsink;
    }
    for (int i = 0; c->mod && i < fg_mod_aux_count(c->mod); i++) { /* trainable arrays: their gradients, NaN first */
        if (fg_mod_aux_trainable(c->mod, i) != 1) continue;
        fg_tensor *g = &a->mod_aux_grad[i];
        *g = a->mod_aux[i];
        b->aux_elems[i] = g->shape[0] * (g->ndim == 2 ? g->shape[1] : 1);
        CK(env->cu->cuMemAlloc(&b->aux_grad[i], (size_t)b->aux_elems[i] * sizeof(float)));
        CK(env->cu->cuMemsetD8(b->aux_grad[i], 0xFF, (size_t)b->aux_elems[i] * sizeof(float)));
        g->data = (void *)(uintptr_t)b->aux_grad[i];
        cr_assert(b->aux_grad_host[i] = malloc((size_t)b->aux_elems[i] * sizeof(float)));
    }
    size_t need = 0;
    cr_assert_eq(fg_attention_bwd_varlen_workspace_size(env->ctx, a, &need), FG_OK, "%s", fg_last_error(env->ctx));
    CK(env->cu->cuMemAlloc(&b->ws, need > 256 ? need : 256));
    CK(env->cu->cuMemsetD8(b->ws, 0xFF, need > 256 ? need : 256)); /* NaN: nothing may be read unwritten */
    a->workspace = (void *)(uintptr_t)b->ws, a->workspace_size = need;
}

static void vbwd_launch(gpu_env *env, vbwd_run *b) {
    dbuf_poison(env, &b->dq), dbuf_poison(env, &b->dk), dbuf_poison(env, &b->dv);
    gpu_poison_shared(env); /* and waits: the poison went through the legacy stream */
    cr_assert_eq(fg_attention_bwd_varlen(env->ctx, &b->a, env->stream), FG_OK, "fg_attention_bwd_varlen: %s",
                 fg_last_error(env->ctx));
    CK(env->cu->cuStreamSynchronize(env->stream));
    dbuf_download(env, &b->dq), dbuf_download(env, &b->dk), dbuf_download(env, &b->dv);
    if (b->dsink) CK(env->cu->cuMemcpyDtoH(b->dsink_host, b->dsink, (size_t)b->a.q.shape[1] * sizeof(float)));
    for (int i = 0; i < FG_MOD_AUX_MAX; i++)
        if (b->aux_grad[i])
            CK(env->cu->cuMemcpyDtoH(b->aux_grad_host[i], b->aux_grad[i], (size_t)b->aux_elems[i] * sizeof(float)));
}

/* Each sequence's gradients against the reference of that sequence alone; with sinks, dsink (summed over the
 * sequences) against the reference's within 1e-3 of the sum of its terms' magnitudes. */
static void vbwd_verify(const serve_run *r, const vbwd_run *b) {
    double dsink_ref[256] = {0}, dsink_mag[256] = {0};
    const serve_case *c = &r->c;
    aux_grad_sums *sums = NULL; /* with trainable aux arrays: the reference of their gradients */
    for (int i = 0; i < FG_MOD_AUX_MAX; i++) {
        if (!b->aux_grad[i]) continue;
        if (!sums) {
            fg_error e;
            cr_assert(sums = calloc(1, sizeof *sums));
            cr_assert_eq(mod_aux_grad(c->mod, &sums->tree, sums->sites, &sums->n_sites, &e), FG_OK, "%s", e.msg);
            for (int k = 0; k < fg_mod_aux_count(c->mod); k++)
                sums->in.aux[k] = c->aux[k], sums->in.extent[k][0] = c->aux_shape[k][0],
                sums->in.extent[k][1] = c->aux_shape[k][1];
        }
        cr_assert(sums->ref[i] = calloc((size_t)b->aux_elems[i], sizeof(double)));
        cr_assert(sums->mag[i] = calloc((size_t)b->aux_elems[i], sizeof(double)));
    }
    check_guard(&b->dq, "dq"), check_guard(&b->dk, "dk"), check_guard(&b->dv, "dv");
    if (c->strided) check_outside_view(&b->dq, "dq"), check_outside_view(&b->dk, "dk"), check_outside_view(&b->dv, "dv");
    const fg_tensor q4 = serve_view4(&r->q.host), k4 = serve_view4(&r->k.host), v4 = serve_view4(&r->v.host);
    const fg_tensor o4 = serve_view4(&r->o.host), do4 = serve_view4(&b->dout.host);
    const fg_tensor dq4 = serve_view4(&b->dq.host), dk4 = serve_view4(&b->dk.host), dv4 = serve_view4(&b->dv.host);
    for (int s = 0; s < c->batch; s++) {
        const int64_t q0 = r->cu_q[s], k0 = r->cu_k[s], lq = r->lq[s], lk = r->lk[s];
        if (lq == 0 && lk == 0) continue;
        ref_bwd_problem p;
        memset(&p, 0, sizeof p);
        p.fwd.q = serve_rows_of(&q4, 0, q0, lq, 2);
        p.fwd.k = serve_rows_of(&k4, 0, k0, lk, 2);
        p.fwd.v = serve_rows_of(&v4, 0, k0, lk, 2);
        p.fwd.causal = c->causal;
        if (c->sinks) p.fwd.sinks = (fg_tensor){(void *)r->sinks, FG_DTYPE_F32, 1, {c->hq, 0, 0, 0}, {1, 0, 0, 0}};
        if (c->alibi) p.fwd.alibi_slopes = (fg_tensor){(void *)r->slopes, FG_DTYPE_F32, 1, {c->hq, 0, 0, 0}, {1, 0, 0, 0}};
        p.fwd.window = c->window, p.fwd.window_left = c->window_left, p.fwd.window_right = c->window_right;
        p.fwd.softcap = c->softcap, p.fwd.causal_top_left = c->causal_top_left;
        serve_mod_user mu;
        serve_mod_hook(c, s, &mu, &p.fwd);
        p.o = serve_rows_of(&o4, 0, q0, lq, 2);
        p.d_o = serve_rows_of(&do4, 0, q0, lq, 2);
        p.lse.dtype = FG_DTYPE_F32, p.lse.ndim = 3;
        p.lse.shape[0] = 1, p.lse.shape[1] = c->hq, p.lse.shape[2] = lq;
        p.lse.stride[0] = 0, p.lse.stride[1] = r->lse.host.stride[0], p.lse.stride[2] = r->lse.host.stride[1];
        p.lse.data = (float *)r->lse.img + q0 * r->lse.host.stride[1];
        const fg_tensor dq = serve_rows_of(&dq4, 0, q0, lq, 2), dk = serve_rows_of(&dk4, 0, k0, lk, 2),
                        dv = serve_rows_of(&dv4, 0, k0, lk, 2);
        ref_bwd_report rep;
        fg_error e;
        fg_error_clear(&e);
        cr_assert_eq(ref_check_bwd(&p, &dq, &dk, &dv, &rep, &e), FG_OK, "sequence %d: %s", s, e.msg);
        char text[512];
        cr_assert(rep.pass, "sequence %d (%lld queries, %lld keys, %s, d %d, hq %d / hkv %d): %s", s, (long long)lq,
                  (long long)lk, c->causal ? "causal" : "not causal", c->d, c->hq, c->hkv,
                  ref_bwd_report_format(&rep, text, sizeof text));
        if (sums) cr_assert_eq(ref_score_grads(&p, aux_grad_visit, sums, &e), FG_OK, "sequence %d: %s", s, e.msg);
        if (c->sinks && lq > 0) {
            double ds[256];
            cr_assert_eq(ref_sink_grad(&p, ds, &e), FG_OK, "sequence %d: %s", s, e.msg);
            for (int h = 0; h < c->hq; h++) dsink_ref[h] += ds[h], dsink_mag[h] += fabs(ds[h]);
        }
    }
    for (int h = 0; c->sinks && h < c->hq; h++)
        cr_assert(fabs(b->dsink_host[h] - dsink_ref[h]) <= 1e-3 * dsink_mag[h] + 1e-5,
                  "dsink[%d] is %g; the reference gives %g", h, (double)b->dsink_host[h], dsink_ref[h]);
    /* each element of a trainable array's gradient, within 1e-3 of the sum of its terms' magnitudes */
    for (int i = 0; sums && i < FG_MOD_AUX_MAX; i++) {
        for (int64_t x = 0; b->aux_grad[i] && x < b->aux_elems[i]; x++)
            cr_assert(fabs(b->aux_grad_host[i][x] - sums->ref[i][x]) <= 1e-3 * sums->mag[i][x] + 1e-6,
                      "mod_aux_grad[%d][%lld] is %g; the reference gives %g (terms' magnitudes %g)", i, (long long)x,
                      (double)b->aux_grad_host[i][x], sums->ref[i][x], sums->mag[i][x]);
        free(sums->ref[i]), free(sums->mag[i]);
    }
    free(sums);
}

static void vbwd_free(gpu_env *env, vbwd_run *b) {
    dbuf_free(env, &b->dout), dbuf_free(env, &b->dq), dbuf_free(env, &b->dk), dbuf_free(env, &b->dv);
    if (b->ws) env->cu->cuMemFree(b->ws);
    if (b->dsink) env->cu->cuMemFree(b->dsink);
    for (int i = 0; i < FG_MOD_AUX_MAX; i++)
        if (b->aux_grad[i]) env->cu->cuMemFree(b->aux_grad[i]), free(b->aux_grad_host[i]);
}

/* Forward, then backward, judged; with `repeat` the backward runs again and must give the same bits. */
static void bwd_case_run(const serve_case *c, int deterministic, int repeat) {
    gpu_env env;
    gpu_open(&env);
    serve_run *r = calloc(1, sizeof *r);
    vbwd_run *b = calloc(1, sizeof *b);
    cr_assert(r && b);
    serve_setup(&env, r, c);
    serve_launch(&env, r);
    serve_verify(r);
    vbwd_setup(&env, r, b, deterministic);
    vbwd_launch(&env, b);
    vbwd_verify(r, b);
    if (repeat) {
        const dbuf *g[3] = {&b->dq, &b->dk, &b->dv};
        unsigned char *first[3];
        for (int i = 0; i < 3; i++) {
            first[i] = malloc((size_t)g[i]->span * g[i]->esize + 1);
            cr_assert(first[i]);
            memcpy(first[i], g[i]->img, (size_t)g[i]->span * g[i]->esize);
        }
        vbwd_launch(&env, b);
        for (int i = 0; i < 3; i++) {
            cr_assert(memcmp(first[i], g[i]->img, (size_t)g[i]->span * g[i]->esize) == 0,
                      "the deterministic mode's %s differs between two runs", i == 0 ? "dq" : i == 1 ? "dk" : "dv");
            free(first[i]);
        }
    }
    vbwd_free(&env, b);
    serve_free(&env, r);
    free(b);
    free(r);
    gpu_close(&env);
}

static const int mixed[] = {1, 63, 64, 65, 129, 0, 300, 1, 200};

Test(bwd_varlen, mixed_lengths_gqa) {
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = bc(FG_DTYPE_BF16, 9, mixed, mixed, 8, 2, 128, causal);
        bwd_case_run(&c, 0, 0);
    }
}

Test(bwd_varlen, head_dims_of_both_families) {
    static const int lq[] = {70, 1, 200, 129};
    static const int dims[] = {64, 96, 192, 256};
    for (size_t i = 0; i < NELEM(dims); i++) {
        serve_case c = bc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 4, lq, lq, 4, 4, dims[i], (int)(i % 2 == 0));
        c.seed = 3 + i;
        bwd_case_run(&c, 0, 0);
    }
}

Test(bwd_varlen, queries_and_keys_of_other_lengths) {
    /* causal with sq > sk: rows without keys (dQ 0); a sequence with keys and no queries (dK, dV 0) */
    static const int lq[] = {100, 7, 0, 64, 250, 40};
    static const int lk[] = {300, 7, 50, 1, 130, 0};
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = bc(FG_DTYPE_F16, 6, lq, lk, 6, 2, 64, causal);
        bwd_case_run(&c, 0, 0);
    }
}

/* A head dim the kernels pad (72, computed at 80) in strided views, whose rows' padding after head_dim is NaN
 * in the inputs and poisoned in the gradients: the columns past 72 are read as zeros and never written. */
Test(bwd_varlen, padded_head_dim_strided) {
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = bc(causal ? FG_DTYPE_F16 : FG_DTYPE_BF16, 9, mixed, mixed, 4, 2, 72, causal);
        c.strided = 1;
        bwd_case_run(&c, 0, 0);
    }
}

Test(bwd_varlen, mqa_and_strided_views) {
    serve_case c = bc(FG_DTYPE_BF16, 9, mixed, mixed, 4, 1, 128, 1);
    c.strided = 1;
    bwd_case_run(&c, 0, 0);
}

Test(bwd_varlen, deterministic_is_bitwise_repeatable) {
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = bc(FG_DTYPE_BF16, 9, mixed, mixed, 8, 2, 128, causal);
        bwd_case_run(&c, 1, 1);
    }
}

/* The model variants' gradients: windows (either side, top-left causal, one wide enough for blocks wholly inside
 * it), softcaps (their derivative in dS), ALiBi, sinks (dsink, summed over sequences), alone and together; a
 * softcap in the deterministic mode. */
Test(bwd_varlen, model_variants) {
    static const struct { int causal, window, left, right, top_left, sinks, alibi, det; float softcap; } v[] = {
        {1, 1, 100, 0, 0, 0, 0, 0, 0.f},   /* a causal sliding window */
        {0, 1, 30, 40, 0, 0, 0, 0, 0.f},   /* both sides bounded */
        {1, 0, 0, 0, 1, 0, 0, 0, 0.f},     /* top-left causal */
        {0, 0, 0, 0, 0, 0, 0, 0, 2.0f},    /* softcap */
        {1, 0, 0, 0, 0, 0, 1, 0, 0.f},     /* ALiBi */
        {1, 0, 0, 0, 0, 1, 0, 0, 0.f},     /* sinks */
        {1, 0, 0, 0, 0, 0, 0, 1, 3.0f},    /* softcap, deterministic */
        {0, 1, 300, 200, 0, 1, 1, 0, 0.f}, /* a wide window: unmasked blocks inside it; sinks, ALiBi */
        {1, 1, 64, -1, 0, 1, 1, 0, 4.0f},  /* everything */
    };
    static const int lq[] = {100, 7, 0, 64, 250, 40, 129}, lk[] = {300, 7, 50, 1, 130, 0, 129};
    for (size_t i = 0; i < NELEM(v); i++) {
        serve_case c = bc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 7, lq, lk, 8, 2, i % 3 == 2 ? 64 : 128, v[i].causal);
        c.window = v[i].window, c.window_left = v[i].left, c.window_right = v[i].right;
        c.causal_top_left = v[i].top_left, c.sinks = v[i].sinks, c.alibi = v[i].alibi, c.softcap = v[i].softcap;
        c.seed = 700 + i;
        bwd_case_run(&c, v[i].det, v[i].det);
    }
}

/* Windows over sequences long enough that key blocks skip whole query blocks on both sides and blocks inside the
 * window take the unmasked path (on an H100/H200 the sm_90a kernel: 128 keys a CTA, 64- to 128-query blocks), with
 * more keys than queries and fewer; d 64 and 128, causal and not, softcap and ALiBi on some. */
Test(bwd_varlen, window_long_sequences) {
    static const int lq[] = {1500, 700, 1100}, lk[] = {1500, 1300, 900};
    static const struct { int d, causal, left, right, alibi; float softcap; } v[] = {
        {128, 1, 256, 0, 0, 0.f}, {64, 1, 200, -1, 1, 0.f}, {128, 0, 300, 150, 0, 5.f}, {64, 0, 129, 127, 0, 0.f},
    };
    for (size_t i = 0; i < NELEM(v); i++) {
        serve_case c = bc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 3, lq, lk, 4, 2, v[i].d, v[i].causal);
        c.window = 1, c.window_left = v[i].left, c.window_right = v[i].right;
        c.alibi = v[i].alibi, c.softcap = v[i].softcap;
        c.seed = 900 + i;
        bwd_case_run(&c, 0, 0);
    }
}

/* Case c with the mod traced from text (c's aux arrays set for it): created, run as bwd_case_run does, destroyed. */
static void bwd_mod_case_run(const char *text, serve_case c) {
    fg_mod *m = NULL;
    cr_assert_eq(fg_mod_create(text, strlen(text), "mod.lua", &m), FG_OK, "%s", fg_last_error(NULL));
    c.mod = m;
    bwd_case_run(&c, 0, 0);
    fg_mod_destroy(m);
}

/* Custom mods' backward (score_mod's derivative from mod_grad in dS; mask_mod's hidden keys out of P): ALiBi and
 * a relative-position table as score mods, a softcap as one (tanh's derivative), a document mask, on both families
 * where the tensors allow the sm_90a kernel (d 64 and 128), over the mixed lengths. */
Test(bwd_varlen, custom_mods) {
    static float slopes[8], table[8][129];
    static int32_t doc[9][400];
    for (int h = 0; h < 8; h++) slopes[h] = 0.5f / (float)(1 << h);
    for (int h = 0; h < 8; h++)
        for (int r = 0; r < 129; r++) table[h][r] = 0.01f * (float)((h * 37 + r * 11) % 50) - 0.25f;
    for (int b = 0; b < 9; b++)
        for (int t = 0; t < 400; t++) doc[b][t] = t / (19 + b);
    static const char *const texts[] = {
        "aux = { slopes = fg.aux('f32', 1) }\n"
        "score_mod = function(s, b, h, q, kv) return s - fg.load(slopes, h) * fg.abs(q - kv) end\n",
        "aux = { bias = fg.aux('f32', 2) }\n"
        "score_mod = function(s, b, h, q, kv) return s + fg.load(bias, h, fg.min(fg.max(kv - q, -64), 64) + 64) end\n",
        "score_mod = function(s, b, h, q, kv) return 8.0 * fg.tanh(s / 8.0) end\n",
        "aux = { doc = fg.aux('i32', 2) }\n"
        "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, b, q), fg.load(doc, b, kv)) end\n",
    };
    for (size_t i = 0; i < NELEM(texts); i++) {
        serve_case c = bc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 9, mixed, mixed, 8, 2, i % 2 ? 64 : 128, i != 1);
        c.seed = 980 + i;
        if (i == 0) c.aux[0] = slopes, c.aux_shape[0][0] = 8;
        if (i == 1) c.aux[0] = table, c.aux_shape[0][0] = 8, c.aux_shape[0][1] = 129;
        if (i == 3) c.aux[0] = doc, c.aux_shape[0][0] = 9, c.aux_shape[0][1] = 400;
        bwd_mod_case_run(texts[i], c);
    }
}

/* Trainable aux arrays (mod_aux_grad): a relative-position bias table [8, 129] and a per-head temperature, their
 * gradients summed by the kernels' atomics against the reference's sums (and dQ, dK, dV as ever), d 64 and 128 (both
 * families where the tensors allow the sm_90a kernel), causal and not, with a document mask on one. */
Test(bwd_varlen, custom_mod_trainable_aux) {
    static float table[8][129], temp[8];
    static int32_t doc[9][400];
    for (int h = 0; h < 8; h++)
        for (int r = 0; r < 129; r++) table[h][r] = 0.01f * (float)((h * 37 + r * 11) % 50) - 0.25f;
    for (int h = 0; h < 8; h++) temp[h] = 0.75f + 0.0625f * (float)h;
    for (int b = 0; b < 9; b++)
        for (int t = 0; t < 400; t++) doc[b][t] = t / (23 + b);
    static const char *const texts[] = {
        "aux = { bias = fg.aux('f32', 2, 'trainable') }\n"
        "score_mod = function(s, b, h, q, kv) return s + fg.load(bias, h, fg.min(fg.max(kv - q, -64), 64) + 64) end\n",
        "aux = { bias = fg.aux('f32', 2, 'trainable'), doc = fg.aux('i32', 2), temp = fg.aux('f32', 1, 'trainable') }\n"
        "score_mod = function(s, b, h, q, kv)\n"
        "  return s * fg.load(temp, h) + fg.load(bias, h, fg.min(fg.max(kv - q, -64), 64) + 64)\n"
        "end\n"
        "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, b, q), fg.load(doc, b, kv)) end\n",
    };
    for (size_t i = 0; i < 2 * NELEM(texts); i++) {
        serve_case c = bc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 9, mixed, mixed, 8, 2, i < 2 ? 128 : 64, i % 3 != 1);
        c.seed = 990 + i;
        c.aux[0] = table, c.aux_shape[0][0] = 8, c.aux_shape[0][1] = 129;
        if (i % 2) {
            c.aux[1] = doc, c.aux_shape[1][0] = 9, c.aux_shape[1][1] = 400;
            c.aux[2] = temp, c.aux_shape[2][0] = 8;
        }
        bwd_mod_case_run(texts[i % NELEM(texts)], c);
    }
}

/* Masks from aux arrays whose block map has holes inside a key block's span of query blocks and blocks it keeps
 * whole (the sm_90a kernel walks the query blocks the map does not hide and evaluates no mask on those it keeps): a
 * block-sparse pattern over 64 x 64 blocks (about half kept, the diagonal always) and documents of 300 tokens, over
 * sequences of 700 to 1100 tokens, d 64 and 128, causal and not. No sequence has more queries than keys: the masks
 * index their arrays by q, which the bottom-right alignment makes negative there (a NaN score, by the contract). */
Test(bwd_varlen, custom_mask_holes_and_whole_blocks) {
    static int32_t blocks[18][18], doc[3][1100];
    for (int i = 0; i < 18; i++)
        for (int j = 0; j < 18; j++) blocks[i][j] = i == j || (i * 7 + j * 5 + i * j) % 5 < 2;
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 1100; t++) doc[b][t] = (t + 100 * b) / 300;
    static const char *const texts[] = {
        "aux = { blocks = fg.aux('i32', 2) }\n"
        "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(blocks, q // 64, kv // 64), 1) end\n",
        "aux = { doc = fg.aux('i32', 2) }\n"
        "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, b, q), fg.load(doc, b, kv)) end\n",
    };
    static const int lq[] = {1100, 700, 700}, lk[] = {1100, 1000, 900};
    for (size_t i = 0; i < 2 * NELEM(texts); i++) {
        serve_case c = bc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 3, lq, lk, 4, 2, i < 2 ? 128 : 64, i / 2 == i % 2);
        c.seed = 1010 + i;
        if (i % 2 == 0) c.aux[0] = blocks, c.aux_shape[0][0] = 18, c.aux_shape[0][1] = 18;
        else c.aux[0] = doc, c.aux_shape[0][0] = 3, c.aux_shape[0][1] = 1100;
        bwd_mod_case_run(texts[i % NELEM(texts)], c);
    }
}

/* A batch whose sequences have keys but no queries: no kernel has rows to run, and dsink is still written (0). */
Test(bwd_varlen, sinks_without_queries) {
    static const int lq[] = {0, 0, 0}, lk[] = {5, 9, 0};
    serve_case c = bc(FG_DTYPE_BF16, 3, lq, lk, 4, 2, 64, 0);
    c.sinks = 1;
    bwd_case_run(&c, 0, 0);
}

/* V of a head dim of its own (head_dim_v, from v's shape): dO and O of V's head dim, dP = dO V^T and D over it, dV
 * of V's, dK and dQ of Q's. DeepSeek's 192/128 with GQA (8 query heads on 2), causal and not, over the mixed
 * lengths (0 and 1 among them); on an H100/H200 its K, V, Q, dO load by TMA (tma=1). */
Test(bwd_varlen, head_dim_v_192_128_gqa) {
    for (int causal = 1; causal >= 0; causal--) {
        serve_case c = bc(causal ? FG_DTYPE_BF16 : FG_DTYPE_F16, 9, mixed, mixed, 8, 2, 192, causal);
        c.dv = 128;
        c.seed = 900 + causal;
        bwd_case_run(&c, 0, 0);
    }
}

/* ... the same with the cp.async loads (FLASHGEN_BWD_TMA=0; the only loads before sm_90), and in the deterministic
 * mode (bitwise repeatable). */
Test(bwd_varlen, head_dim_v_192_128_cp_async_and_deterministic) {
    setenv("FLASHGEN_BWD_TMA", "0", 1); /* read by the context gpu_open creates */
    serve_case c = bc(FG_DTYPE_BF16, 9, mixed, mixed, 8, 2, 192, 1);
    c.dv = 128;
    c.seed = 910;
    bwd_case_run(&c, 0, 0);
    unsetenv("FLASHGEN_BWD_TMA");
    c.causal = 0, c.seed = 911;
    bwd_case_run(&c, 1, 1);
}

/* V narrower and wider than Q and K: (128, 64) and (64, 128), each warp's dK and dV parts of different widths;
 * (72, 40), both padded (to 80 and 48, the cp.async loaders' zero columns), in strided views with NaN in their
 * padding; GQA and MQA, both masks, both dtypes, mixed lengths with 0 and 1. */
Test(bwd_varlen, head_dim_v_narrower_and_wider) {
    static const struct { int d, dv, hkv, causal, strided; fg_dtype dt; } v[] = {
        {128, 64, 2, 1, 0, FG_DTYPE_BF16}, {128, 64, 1, 0, 0, FG_DTYPE_F16}, {64, 128, 2, 0, 0, FG_DTYPE_BF16},
        {64, 128, 4, 1, 0, FG_DTYPE_F16},  {72, 40, 2, 1, 1, FG_DTYPE_F16},  {72, 40, 4, 0, 1, FG_DTYPE_BF16},
    };
    for (size_t i = 0; i < NELEM(v); i++) {
        serve_case c = bc(v[i].dt, 9, mixed, mixed, 4, v[i].hkv, v[i].d, v[i].causal);
        c.dv = v[i].dv, c.strided = v[i].strided;
        c.seed = 920 + i;
        bwd_case_run(&c, 0, 0);
    }
}

/* Queries and keys of other lengths (rows without keys; keys without queries: dK, dV 0) with V of its own head dim,
 * then the model variants with it: a causal window and sinks at 192/128 (dsink from D, a sum over V's head dim). */
Test(bwd_varlen, head_dim_v_cross_lengths_and_window) {
    static const int lq[] = {100, 7, 0, 64, 250, 40}, lk[] = {300, 7, 50, 1, 130, 0};
    serve_case c = bc(FG_DTYPE_BF16, 6, lq, lk, 6, 2, 192, 1);
    c.dv = 128, c.seed = 930;
    bwd_case_run(&c, 0, 0);
    c.window = 1, c.window_left = 64, c.window_right = 0, c.sinks = 1, c.seed = 931;
    bwd_case_run(&c, 0, 0);
}

/* The dense call (fg_attention_bwd) takes V of its own head dim too (v.shape[3]): one sequence's packed tensors as
 * a batch of one ([1, tokens, heads, d] views, the LSE [1, heads_q, tokens]), judged as the varlen call's are. */
Test(bwd_varlen, head_dim_v_dense_call) {
    static const int lq[] = {150}, lk[] = {300};
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = bc(FG_DTYPE_BF16, 1, lq, lk, 8, 2, 192, causal);
        c.dv = 128, c.seed = 940 + causal;
        gpu_env env;
        gpu_open(&env);
        serve_run *r = calloc(1, sizeof *r);
        vbwd_run *b = calloc(1, sizeof *b);
        cr_assert(r && b);
        serve_setup(&env, r, &c);
        serve_launch(&env, r);
        serve_verify(r);
        vbwd_setup(&env, r, b, 0);
        fg_bwd_args a;
        memset(&a, 0, sizeof a);
        a.q = serve_view4(&b->a.q), a.k = serve_view4(&b->a.k), a.v = serve_view4(&b->a.v), a.o = serve_view4(&b->a.o);
        a.dout = serve_view4(&b->a.dout), a.dq = serve_view4(&b->a.dq), a.dk = serve_view4(&b->a.dk);
        a.dv = serve_view4(&b->a.dv);
        const fg_tensor *l = &b->a.lse; /* [heads_q, tokens] */
        a.lse = (fg_tensor){l->data, FG_DTYPE_F32, 3, {1, l->shape[0], l->shape[1], 0}, {0, l->stride[0], l->stride[1], 0}};
        a.causal = causal;
        cr_assert_eq(fg_attention_bwd_workspace_size(env.ctx, &a, &a.workspace_size), FG_OK, "%s", fg_last_error(env.ctx));
        CUdeviceptr ws;
        CK(env.cu->cuMemAlloc(&ws, a.workspace_size > 256 ? a.workspace_size : 256));
        CK(env.cu->cuMemsetD8(ws, 0xFF, a.workspace_size > 256 ? a.workspace_size : 256));
        a.workspace = (void *)(uintptr_t)ws;
        dbuf_poison(&env, &b->dq), dbuf_poison(&env, &b->dk), dbuf_poison(&env, &b->dv);
        gpu_poison_shared(&env);
        cr_assert_eq(fg_attention_bwd(env.ctx, &a, env.stream), FG_OK, "fg_attention_bwd: %s", fg_last_error(env.ctx));
        CK(env.cu->cuStreamSynchronize(env.stream));
        dbuf_download(&env, &b->dq), dbuf_download(&env, &b->dk), dbuf_download(&env, &b->dv);
        vbwd_verify(r, b);
        env.cu->cuMemFree(ws);
        vbwd_free(&env, b);
        serve_free(&env, r);
        free(b);
        free(r);
        gpu_close(&env);
    }
}
