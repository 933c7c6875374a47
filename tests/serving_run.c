/* serving_run.c: one serving call set up, run and judged (serving_run.h). */
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "runtime/runtime.h"
#include "generator/mod.h"
#include "tests/serving_run.h"

float serve_sink(int h) { return -2.0f + 0.7f * (float)(h % 7); }
float serve_slope(int h) { return 0.1f / (float)(1 << (h % 8)); }
float serve_descale(int kv, int per_head, int b, int h) {
    if (!per_head) return kv ? 1.6f : 0.7f;
    return kv ? 0.25f + 0.3f * (float)((b + 2 * h) % 5) : 0.5f + 0.1f * (float)((3 * b + h) % 7);
}

CUdeviceptr upload_ints(gpu_env *env, const int32_t *v, size_t n) {
    CUdeviceptr d = 0;
    CK(env->cu->cuMemAlloc(&d, n * 4 > 256 ? n * 4 : 256));
    if (n > 0) CK(env->cu->cuMemcpyHtoD(d, v, n * 4));
    return d;
}

fg_tensor serve_view4(const fg_tensor *t) {
    if (t->ndim == 4) return *t;
    fg_tensor v = *t;
    v.ndim = 4;
    for (int i = 2; i >= 0; i--) v.shape[i + 1] = t->shape[i], v.stride[i + 1] = t->stride[i];
    v.shape[0] = 1;
    v.stride[0] = t->shape[0] * t->stride[0];
    return v;
}

fg_tensor serve_rows_of(const fg_tensor *t4, int64_t b, int64_t row0, int64_t n, size_t esize) {
    fg_tensor v = *t4;
    v.data = (char *)t4->data + (size_t)(b * t4->stride[0] + row0 * t4->stride[1]) * esize;
    v.shape[0] = 1;
    v.shape[1] = n;
    return v;
}

static void nan_row(dbuf *b, int64_t i0, int64_t i1, int64_t heads, int64_t d) {
    for (int64_t h = 0; h < heads; h++)
        memset(b->img + (size_t)(i0 * b->view.stride[0] + i1 * b->view.stride[1] + h * b->view.stride[2]) * b->esize,
               0xFF, (size_t)d * b->esize);
}

static void fill(dbuf *b, uint64_t seed) {
    memset(b->img, 0xFF, (size_t)b->span * b->esize); /* padding NaN */
    fg_tensor h = serve_view4(&b->host);
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_fill_normal(&h, seed, &e), FG_OK, "%s", e.msg);
}

static void upload(gpu_env *env, dbuf *b) {
    if (b->span > 0) CK(env->cu->cuMemcpyHtoD(b->dptr, b->img, (size_t)b->span * b->esize));
}

void serve_setup(gpu_env *env, serve_run *r, const serve_case *c) {
    memset(r, 0, sizeof *r);
    r->c = *c;
    cr_assert(c->batch >= 0 && c->batch <= 1024, "batch %d out of the harness's range", c->batch);
    int maxq = 0, maxk = 0;
    r->cu_q[0] = r->cu_k[0] = 0;
    for (int b = 0; b < c->batch; b++) {
        r->lq[b] = c->lq[b], r->lk[b] = c->lk[b];
        r->cu_q[b + 1] = r->cu_q[b] + r->lq[b];
        r->cu_k[b + 1] = r->cu_k[b] + r->lk[b];
        maxq = r->lq[b] > maxq ? r->lq[b] : maxq;
        maxk = r->lk[b] > maxk ? r->lk[b] : maxk;
        if (c->q_dense) cr_assert_eq(r->lq[b], r->lq[0], "dense q needs equal query lengths");
    }
    r->total_q = r->cu_q[c->batch];
    r->total_k = r->cu_k[c->batch];
    r->seqlen_q = c->q_dense ? (c->batch ? r->lq[0] : 0) : maxq;
    const uint64_t seed = c->seed ? c->seed : 0x5e7e;
    int64_t st[4];
    /* q and o (o of V's head dim) */
    const int dv = c->dv ? c->dv : c->d;
    int64_t qs4[4] = {c->batch, r->seqlen_q, c->hq, c->d}, qs3[3] = {r->total_q, c->hq, c->d};
    const int qn = c->q_dense ? 4 : 3;
    make_strides(qn, c->q_dense ? qs4 : qs3, c->strided, st);
    dbuf_init(env, &r->q, c->dt, qn, c->q_dense ? qs4 : qs3, st, 0, 0);
    qs4[3] = qs3[2] = dv;
    make_strides(qn, c->q_dense ? qs4 : qs3, c->strided, st);
    dbuf_init(env, &r->o, c->dt, qn, c->q_dense ? qs4 : qs3, st, GUARD, 0);
    fill(&r->q, seed + 1);
    upload(env, &r->q);
    /* k and v (FP8: rows of bytes, padded by 16 of them when strided) */
    const fg_dtype kdt = c->kv_fp8 ? (fg_dtype)c->kv_fp8 : c->dt;
    const int kpad = c->strided ? (c->kv_fp8 ? 2 : 1) : 0;
    int64_t ks[4];
    int kn = 4;
    const int cap = c->cap_k ? c->cap_k : maxk;
    if (c->k_mode == SERVE_K_PACKED) kn = 3, ks[0] = r->total_k, ks[1] = c->hkv, ks[2] = c->d;
    else if (c->k_mode == SERVE_K_DENSE) ks[0] = c->batch, ks[1] = cap, ks[2] = c->hkv, ks[3] = c->d;
    else {
        cr_assert(c->page_size > 0, "paged case without a page size");
        int used = 0;
        for (int b = 0; b < c->batch; b++) {
            const int pg = (r->lk[b] + c->page_size - 1) / c->page_size;
            used += pg;
            r->max_pages = pg > r->max_pages ? pg : r->max_pages;
        }
        r->max_pages += 1;        /* a column no sequence reaches: garbage indices */
        r->num_pages = used + 3;  /* pages no sequence uses: NaN */
        ks[0] = r->num_pages, ks[1] = c->page_size, ks[2] = c->hkv, ks[3] = c->d;
    }
    make_strides(kn, ks, kpad, st);
    dbuf_init(env, &r->k, kdt, kn, ks, st, 0, 0);
    ks[kn - 1] = dv;
    make_strides(kn, ks, kpad, st);
    dbuf_init(env, &r->v, kdt, kn, ks, st, 0, 0);
    fill(&r->k, seed + 2);
    fill(&r->v, seed + 3);
    if (c->k_mode == SERVE_K_DENSE) /* slots past each sequence's keys: NaN */
        for (int b = 0; b < c->batch; b++)
            for (int j = r->lk[b]; j < cap; j++) nan_row(&r->k, b, j, c->hkv, c->d), nan_row(&r->v, b, j, c->hkv, dv);
    if (c->k_mode == SERVE_K_PAGED) {
        /* pages in a shuffled order; every slot NaN first, then each sequence's keys' slots filled again */
        int *perm = malloc((size_t)r->num_pages * sizeof *perm);
        r->table = malloc((size_t)(c->batch ? c->batch : 1) * (size_t)r->max_pages * sizeof *r->table);
        cr_assert(perm && r->table);
        for (int i = 0; i < r->num_pages; i++) perm[i] = i;
        uint64_t x = seed * 2654435761u + 1;
        for (int i = r->num_pages - 1; i > 0; i--) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            const int j = (int)((x >> 33) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        unsigned char *ik = malloc((size_t)r->k.span * r->k.esize), *iv = malloc((size_t)r->v.span * r->v.esize);
        cr_assert(ik && iv);
        memcpy(ik, r->k.img, (size_t)r->k.span * r->k.esize);
        memcpy(iv, r->v.img, (size_t)r->v.span * r->v.esize);
        memset(r->k.img, 0xFF, (size_t)r->k.span * r->k.esize);
        memset(r->v.img, 0xFF, (size_t)r->v.span * r->v.esize);
        int next = 0;
        for (int b = 0; b < c->batch; b++)
            for (int s = 0; s < r->max_pages; s++) {
                const int pages = (r->lk[b] + c->page_size - 1) / c->page_size;
                int32_t *slot = &r->table[(size_t)b * r->max_pages + s];
                if (s >= pages) {
                    *slot = s % 2 ? -7 : 0x7ffffff0; /* never read */
                    continue;
                }
                *slot = perm[next++];
                for (int j = 0; j < c->page_size && s * c->page_size + j < r->lk[b]; j++)
                    for (int h = 0; h < c->hkv; h++) {
                        const size_t off = (size_t)(*slot * r->k.view.stride[0] + j * r->k.view.stride[1] +
                                                    h * r->k.view.stride[2]) * r->k.esize;
                        const size_t voff = (size_t)(*slot * r->v.view.stride[0] + j * r->v.view.stride[1] +
                                                     h * r->v.view.stride[2]) * r->v.esize;
                        memcpy(r->k.img + off, ik + off, (size_t)c->d * r->k.esize);
                        memcpy(r->v.img + voff, iv + voff, (size_t)dv * r->v.esize);
                    }
            }
        free(ik), free(iv), free(perm);
        r->d_table = upload_ints(env, r->table, (size_t)c->batch * r->max_pages);
    }
    upload(env, &r->k);
    upload(env, &r->v);
    if (c->v_in_k) { /* V becomes K's first dv columns: the same memory (device and host image) and strides */
        cr_assert(dv <= c->d, "v_in_k needs dv <= d");
        dbuf_free(env, &r->v);
        r->v = r->k;
        r->v.view.shape[kn - 1] = r->v.host.shape[kn - 1] = dv;
    }
    /* lse */
    if (!c->no_lse) {
        int64_t l3[3] = {c->batch, c->hq, r->seqlen_q}, l2[2] = {c->hq, r->total_q};
        dbuf_init(env, &r->lse, FG_DTYPE_F32, c->q_dense ? 3 : 2, c->q_dense ? l3 : l2, NULL, GUARD, 0);
    }
    /* lengths */
    if (!c->q_dense) r->d_cu_q = upload_ints(env, r->cu_q, (size_t)c->batch + 1);
    if (c->k_mode == SERVE_K_PACKED) r->d_cu_k = upload_ints(env, r->cu_k, (size_t)c->batch + 1);
    else if (!c->no_seqused) r->d_used = upload_ints(env, r->lk, (size_t)c->batch);
    if (c->no_seqused)
        for (int b = 0; b < c->batch; b++)
            cr_assert(c->k_mode == SERVE_K_DENSE && r->lk[b] == cap, "no_seqused needs a dense cache of lk = cap_k");
    for (int w = 0; w < 2; w++) { /* the per-head arrays: sinks, ALiBi slopes */
        if (!(w ? c->alibi : c->sinks)) continue;
        cr_assert(c->hq <= 256, "per-head arrays for at most 256 heads here");
        float *host = w ? r->slopes : r->sinks;
        CUdeviceptr *dev = w ? &r->d_slopes : &r->d_sinks;
        for (int h = 0; h < c->hq; h++) host[h] = w ? serve_slope(h) : serve_sink(h);
        CK(env->cu->cuMemAlloc(dev, 256 * sizeof(float)));
        CK(env->cu->cuMemcpyHtoD(*dev, host, (size_t)c->hq * sizeof(float)));
    }
    for (int i = 0; i < 2 && c->descale; i++) { /* FP8 K's and V's descales: [1], or [batch, hkv] head-major */
        const int n = c->descale == 2 ? c->batch * c->hkv : 1;
        r->descales[i] = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        cr_assert(r->descales[i]);
        for (int b = 0; b < c->batch; b++)
            for (int h = 0; h < c->hkv; h++)
                r->descales[i][c->descale == 2 ? h * c->batch + b : 0] = serve_descale(i, c->descale == 2, b, h);
        if (c->batch == 0) r->descales[i][0] = serve_descale(i, 0, 0, 0);
        CK(env->cu->cuMemAlloc(&r->d_descales[i], 256 + (size_t)n * sizeof(float)));
        CK(env->cu->cuMemcpyHtoD(r->d_descales[i], r->descales[i], (size_t)n * sizeof(float)));
    }
    for (int i = 0; i < fg_mod_aux_count(c->mod); i++) { /* the mod's aux arrays, as the mod declares them */
        fg_dtype dt;
        int rank;
        cr_assert_eq(fg_mod_aux_info(c->mod, i, NULL, &dt, &rank), FG_OK);
        const size_t bytes = (size_t)c->aux_shape[i][0] * (size_t)(rank == 2 ? c->aux_shape[i][1] : 1) * 4;
        CK(env->cu->cuMemAlloc(&r->d_aux[i], bytes));
        CK(env->cu->cuMemcpyHtoD(r->d_aux[i], c->aux[i], bytes));
    }
    /* arguments */
    fg_varlen_args *a = &r->args;
    fg_varlen_args_init(a);
    a->q = r->q.view, a->k = r->k.view, a->v = r->v.view, a->o = r->o.view;
    if (!c->no_lse) a->lse = r->lse.view;
    a->cu_seqlens_q = (const int32_t *)(uintptr_t)r->d_cu_q;
    a->cu_seqlens_k = (const int32_t *)(uintptr_t)r->d_cu_k;
    a->seqused_k = (const int32_t *)(uintptr_t)r->d_used;
    a->block_table = (const int32_t *)(uintptr_t)r->d_table;
    a->max_pages = r->max_pages;
    a->batch = c->q_dense ? 0 : c->batch;
    a->max_seqlen_q = r->seqlen_q;
    a->max_seqlen_k = maxk;
    a->causal = c->causal;
    a->num_splits = c->num_splits;
    a->split_size = c->split_size;
    a->sinks = (const float *)(uintptr_t)r->d_sinks;
    a->window = c->window, a->window_left = c->window_left, a->window_right = c->window_right;
    a->softcap = c->softcap;
    a->causal_top_left = c->causal_top_left;
    a->alibi_slopes = (const float *)(uintptr_t)r->d_slopes;
    a->mod = c->mod;
    for (int i = 0; i < fg_mod_aux_count(c->mod); i++) {
        fg_dtype dt;
        int rank;
        fg_mod_aux_info(c->mod, i, NULL, &dt, &rank);
        fg_tensor *t = &a->mod_aux[i];
        t->data = (void *)(uintptr_t)r->d_aux[i], t->dtype = dt, t->ndim = rank;
        t->shape[0] = c->aux_shape[i][0], t->shape[1] = rank == 2 ? c->aux_shape[i][1] : 0;
        t->stride[0] = rank == 2 ? c->aux_shape[i][1] : 1, t->stride[1] = 1;
    }
    fg_tensor *ds[2] = {&a->k_descale, &a->v_descale};
    for (int i = 0; i < 2 && c->descale; i++) {
        fg_tensor *t = ds[i];
        t->data = (void *)(uintptr_t)r->d_descales[i], t->dtype = FG_DTYPE_F32;
        if (c->descale == 2) t->ndim = 2, t->shape[0] = c->batch, t->shape[1] = c->hkv, t->stride[0] = 1, t->stride[1] = c->batch;
        else t->ndim = 1, t->shape[0] = 1, t->stride[0] = 1;
    }
    size_t ws = 0;
    cr_assert_eq(fg_attention_fwd_varlen_workspace_size(env->ctx, a, &ws), FG_OK, "%s", fg_last_error(env->ctx));
    if (c->num_splits > 1 || c->split_size > 0) { /* a forced split must plan a workspace */
        const int64_t nb_max = (maxk + 15) / 16;
        cr_assert(ws > 0 || nb_max <= 1 || c->num_splits <= 1, "a %d-split call asks for no workspace", c->num_splits);
    }
    r->ws_size = ws;
    CK(env->cu->cuMemAlloc(&r->ws, ws > 256 ? ws : 256));
    CK(env->cu->cuMemsetD8(r->ws, 0xFF, ws > 256 ? ws : 256)); /* NaN: a partial never written shows */
    a->workspace = (void *)(uintptr_t)r->ws;
    a->workspace_size = ws;
}

void serve_launch(gpu_env *env, serve_run *r) {
    dbuf_poison(env, &r->o);
    if (!r->c.no_lse) dbuf_poison(env, &r->lse);
    gpu_poison_shared(env); /* and waits: the poison went through the legacy stream */
    fg_status st;
    if (r->c.tiles[0]) {
        fg_spec s;
        memset(&s, 0, sizeof s);
        s.kind = FG_KIND_SERVE;
        s.arch = gpu_cc(env);
        s.dtype = s.out_dtype = r->c.dt;
        s.head_dim = r->c.d;
        s.head_dim_v = r->c.dv;
        s.causal = r->c.causal;
        s.block_m = r->c.tiles[0], s.block_n = r->c.tiles[1], s.warps = r->c.tiles[2], s.stages = r->c.tiles[3];
        s.tma = r->c.tma;
        s.kv_fp8 = r->c.kv_fp8;
        fg_error e;
        fg_error_clear(&e);
        st = rt_varlen_with_spec(env->ctx, &s, &r->args, env->stream, &e);
        cr_assert_eq(st, FG_OK, "rt_varlen_with_spec: %s", e.msg);
    } else {
        st = fg_attention_fwd_varlen(env->ctx, &r->args, env->stream);
        cr_assert_eq(st, FG_OK, "fg_attention_fwd_varlen: %s", fg_last_error(env->ctx));
    }
    CK(env->cu->cuStreamSynchronize(env->stream));
    dbuf_download(env, &r->o);
    if (!r->c.no_lse) dbuf_download(env, &r->lse);
}

/* Sequence b's keys (or values) as a contiguous [1, lk, hkv, d] host tensor gathered from the pages. */
static fg_tensor gather_pages(const serve_run *r, const dbuf *kv, int b) {
    const serve_case *c = &r->c;
    const int64_t d = kv->view.shape[3]; /* K's or V's head dim */
    fg_tensor t = {0};
    t.dtype = kv->view.dtype;
    t.ndim = 4;
    t.shape[0] = 1, t.shape[1] = r->lk[b], t.shape[2] = c->hkv, t.shape[3] = d;
    make_strides(4, t.shape, 0, t.stride);
    t.data = malloc((size_t)r->lk[b] * c->hkv * d * kv->esize + 2);
    cr_assert(t.data);
    for (int j = 0; j < r->lk[b]; j++) {
        const int page = r->table[(size_t)b * r->max_pages + j / c->page_size];
        for (int h = 0; h < c->hkv; h++)
            memcpy((char *)t.data + (size_t)(j * t.stride[1] + h * t.stride[2]) * kv->esize,
                   kv->img + (size_t)(page * kv->view.stride[0] + (j % c->page_size) * kv->view.stride[1] +
                                      h * kv->view.stride[2]) * kv->esize,
                   (size_t)d * kv->esize);
    }
    return t;
}

/* A custom mod's evaluation for the reference (ref_problem's callbacks): the tree on the case's host arrays, and
 * score_mod's derivative from mod_grad's tree. */
static double serve_mod_score(const void *user, double logit, int b, int h, int i, int j) {
    const serve_mod_user *u = user;
    mod_inputs in = u->in;
    in.s = logit, in.b = b, in.h = h, in.q = i, in.kv = j;
    return mod_eval_score(u->mod, &in);
}
static double serve_mod_score_grad(const void *user, double logit, int b, int h, int i, int j, double *d) {
    const serve_mod_user *u = user;
    mod_inputs in = u->in;
    in.s = logit, in.b = b, in.h = h, in.q = i, in.kv = j;
    *d = mod_eval_node(&u->with_grad, u->grad, &in);
    return mod_eval_score(u->mod, &in);
}
static int serve_mod_mask(const void *user, int b, int h, int i, int j) {
    const serve_mod_user *u = user;
    mod_inputs in = u->in;
    in.b = b, in.h = h, in.q = i, in.kv = j;
    return mod_eval_mask(u->mod, &in);
}

void serve_mod_hook(const serve_case *c, int b, serve_mod_user *mu, ref_problem *p) {
    if (!c->mod) return;
    memset(mu, 0, sizeof *mu);
    mu->mod = c->mod;
    for (int i = 0; i < fg_mod_aux_count(c->mod); i++)
        mu->in.aux[i] = c->aux[i], mu->in.extent[i][0] = c->aux_shape[i][0], mu->in.extent[i][1] = c->aux_shape[i][1];
    p->mod_user = mu, p->mod_batch0 = b;
    if (c->mod->score >= 0) {
        fg_error e;
        cr_assert_eq(mod_grad(c->mod, &mu->with_grad, &mu->grad, &e), FG_OK, "%s", e.msg);
        p->mod_score = serve_mod_score, p->mod_score_grad = serve_mod_score_grad;
    }
    if (c->mod->mask >= 0) p->mod_mask = serve_mod_mask;
}

void serve_verify(serve_run *r) {
    const serve_case *c = &r->c;
    check_guard(&r->o, "o");
    if (c->strided) check_outside_view(&r->o, "o");
    if (!c->no_lse) check_guard(&r->lse, "lse");
    const fg_tensor q4 = serve_view4(&r->q.host), o4 = serve_view4(&r->o.host);
    const fg_tensor k4 = serve_view4(&r->k.host), v4 = serve_view4(&r->v.host);
    for (int b = 0; b < c->batch; b++) {
        if (r->lq[b] == 0) continue;
        const int64_t qb = c->q_dense ? b : 0, q0 = c->q_dense ? 0 : r->cu_q[b];
        ref_problem p;
        memset(&p, 0, sizeof p);
        p.q = serve_rows_of(&q4, qb, q0, r->lq[b], 2);
        const fg_tensor out = serve_rows_of(&o4, qb, q0, r->lq[b], 2);
        if (c->k_mode == SERVE_K_PAGED) {
            p.k = gather_pages(r, &r->k, b);
            p.v = gather_pages(r, &r->v, b);
        } else {
            const int64_t kb = c->k_mode == SERVE_K_DENSE ? b : 0, k0 = c->k_mode == SERVE_K_DENSE ? 0 : r->cu_k[b];
            p.k = serve_rows_of(&k4, kb, k0, r->lk[b], r->k.esize);
            p.v = serve_rows_of(&v4, kb, k0, r->lk[b], r->v.esize);
        }
        /* FP8 K's and V's descales: sequence b's row of [batch, hkv] (head-major: stride 1 between sequences) */
        const fg_tensor ds_view = {0, FG_DTYPE_F32, 2, {1, c->hkv}, {1, c->batch}};
        fg_tensor *ds[2] = {&p.k_descale, &p.v_descale};
        for (int i = 0; i < 2 && c->descale; i++) {
            *ds[i] = c->descale == 2 ? ds_view : (fg_tensor){0, FG_DTYPE_F32, 1, {1}, {1}};
            ds[i]->data = r->descales[i] + (c->descale == 2 ? b : 0);
        }
        p.causal = c->causal;
        if (c->sinks) p.sinks = (fg_tensor){(void *)r->sinks, FG_DTYPE_F32, 1, {c->hq, 0, 0, 0}, {1, 0, 0, 0}};
        if (c->alibi) p.alibi_slopes = (fg_tensor){(void *)r->slopes, FG_DTYPE_F32, 1, {c->hq, 0, 0, 0}, {1, 0, 0, 0}};
        p.window = c->window, p.window_left = c->window_left, p.window_right = c->window_right;
        p.softcap = c->softcap;
        p.causal_top_left = c->causal_top_left;
        serve_mod_user mu; /* the tree's fp64 evaluation on the host copies, sequence b as batch b */
        serve_mod_hook(c, b, &mu, &p);
        fg_tensor lse = {0};
        if (!c->no_lse) {
            lse.dtype = FG_DTYPE_F32;
            lse.ndim = 3;
            lse.shape[0] = 1, lse.shape[1] = c->hq, lse.shape[2] = r->lq[b];
            if (c->q_dense) {
                memcpy(lse.stride, r->lse.host.stride, sizeof lse.stride);
                lse.data = (float *)r->lse.img + b * r->lse.host.stride[0];
            } else {
                lse.stride[0] = 0, lse.stride[1] = r->lse.host.stride[0], lse.stride[2] = r->lse.host.stride[1];
                lse.data = (float *)r->lse.img + r->cu_q[b] * r->lse.host.stride[1];
            }
        }
        ref_report rep;
        fg_error e;
        fg_error_clear(&e);
        const fg_status st = ref_check_fwd(&p, &out, c->no_lse ? NULL : &lse, &rep, &e);
        if (c->k_mode == SERVE_K_PAGED) free(p.k.data), free(p.v.data);
        cr_assert_eq(st, FG_OK, "reference: %s", e.msg);
        char msg[1024];
        cr_assert(rep.pass, "sequence %d (lq %d, lk %d): %s", b, r->lq[b], r->lk[b], ref_report_format(&rep, msg, sizeof msg));
    }
}

void serve_free(gpu_env *env, serve_run *r) {
    if (r->c.v_in_k) memset(&r->v, 0, sizeof r->v); /* K's, freed with it */
    dbuf *bufs[5] = {&r->q, &r->k, &r->v, &r->o, &r->lse};
    for (int i = 0; i < 5; i++) dbuf_free(env, bufs[i]);
    CUdeviceptr d[9] = {r->d_cu_q, r->d_cu_k, r->d_used, r->d_table, r->ws, r->d_sinks, r->d_slopes,
                        r->d_descales[0], r->d_descales[1]};
    for (int i = 0; i < 9; i++)
        if (d[i]) env->cu->cuMemFree(d[i]);
    free(r->descales[0]), free(r->descales[1]);
    for (int i = 0; i < FG_MOD_AUX_MAX; i++)
        if (r->d_aux[i]) env->cu->cuMemFree(r->d_aux[i]);
    free(r->table);
    memset(r, 0, sizeof *r);
}

void serve_case_run(const serve_case *c) {
    gpu_env env;
    gpu_open(&env);
    serve_run *r = calloc(1, sizeof *r);
    cr_assert(r);
    serve_setup(&env, r, c);
    serve_launch(&env, r);
    serve_verify(r);
    serve_free(&env, r);
    free(r);
    gpu_close(&env);
}
