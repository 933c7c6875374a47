/* gpu_run.c: one forward or backward call as the GPU tests make it: a case's tensors set up on the
 * device, the outputs poisoned, the call made (through the public API, or the runtime's entry for an
 * explicit variant), and the outputs judged element by element by the CPU reference; plus the extra
 * contexts, in-memory bundles and log sinks the runtime tests use. Contracts in gpu_harness.h. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashgen.h"
#include "reference/reference.h"
#include "runtime/bundle.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"
#include "tests/gpu_harness.h"

/* ------------------------------------------------------------------------------------------------ */
/* One forward case                                                                                  */
/* ------------------------------------------------------------------------------------------------ */

/* The dtype's short name for log lines. */
static const char *dt_name(fg_dtype dt) {
    return dt == FG_DTYPE_F16 ? "f16" : dt == FG_DTYPE_BF16 ? "bf16" : dt == FG_DTYPE_E4M3 ? "e4m3"
                                                                      : dt == FG_DTYPE_E5M2 ? "e5m2" : "?";
}

/* Writes the case's one-line description into buf (n bytes). */
void case_name(const fwd_case *c, char *buf, size_t n) {
    int len = snprintf(buf, n, "%s b=%d sq=%d sk=%d hq=%d hkv=%d d=%d causal=%d scale=%g%s%s", dt_name(c->dt), c->b,
                       c->sq, c->sk, c->hq, c->hkv, c->d, c->causal, (double)c->scale, c->strided ? " strided" : "",
                       c->no_lse ? " no-lse" : "");
    if (c->tiles[0] && len > 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, " tiles %dx%d w%d s%d", c->tiles[0], c->tiles[1], c->tiles[2],
                        c->tiles[3]);
    if (dtype_is_fp8(c->dt) && len > 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, " out=%s descale=%s amp=%g vmean=%g", c->out_f16 ? "f16" : "bf16",
                 c->descale == 0 ? "none" : c->descale == 1 ? "tensor" : "head", (double)(c->amp ? c->amp : 1.f),
                 (double)c->vmean);
}

/* Allocates and uploads a case's tensors and fills in the arguments. */
void run_setup(gpu_env *env, fwd_run *r, const fwd_case *c) {
    memset(r, 0, sizeof *r);
    r->c = *c;
    int64_t qs[4] = {c->b, c->sq, c->hq, c->d}, ks[4] = {c->b, c->sk, c->hkv, c->d}, ls[3] = {c->b, c->hq, c->sq};
    int64_t st[4];
    const fg_dtype odt = dtype_is_fp8(c->dt) ? (c->out_f16 ? FG_DTYPE_F16 : FG_DTYPE_BF16) : c->dt;
    const int pad = c->strided ? (dtype_is_fp8(c->dt) ? 2 : 1) : 0; /* in elements: 16-byte multiples either way */
    make_strides(4, qs, pad, st);
    dbuf_init(env, &r->q, c->dt, 4, qs, st, 0, 0);
    int64_t ost[4];
    make_strides(4, qs, c->strided, ost);
    dbuf_init(env, &r->o, odt, 4, qs, ost, GUARD, 0);
    make_strides(4, ks, pad, st);
    dbuf_init(env, &r->k, c->dt, 4, ks, st, 0, 0);
    if (dtype_is_fp8(c->dt)) {
        /* V key-major, as FP8 takes it: [b, hkv, d, skp] viewed as [b, sk, hkv, d]. The rows are padded
         * past sk (to a multiple of 16, plus 16 when strided) and the padding holds NaN, which the kernel
         * must never let reach a probability. */
        int64_t skp = (c->sk + 15) / 16 * 16 + (c->strided ? 16 : 0);
        int64_t vst[4] = {c->hkv * c->d * skp, 1, c->d * skp, skp};
        dbuf_init(env, &r->v, c->dt, 4, ks, vst, 0, 0);
    } else {
        dbuf_init(env, &r->v, c->dt, 4, ks, st, 0, 0);
    }
    dbuf_upload_random(env, &r->q, 0x51ull + (uint64_t)c->d);
    dbuf_upload_random(env, &r->k, 0x52ull + (uint64_t)c->sk);
    dbuf_upload_random(env, &r->v, 0x53ull + (uint64_t)c->sq);
    if (dtype_is_fp8(c->dt) && ((c->amp != 0.f && c->amp != 1.f) || c->vmean != 0.f)) {
        /* Scaled inputs, saturated to the format's largest finite value (the saturation cases), and V
         * shifted by vmean. */
        const float amp = c->amp != 0.f ? c->amp : 1.f;
        dbuf *bs[3] = {&r->q, &r->k, &r->v};
        for (int i = 0; i < 3; i++) {
            dbuf *b = bs[i];
            int64_t sh[4] = {b->view.shape[0], b->view.shape[1], b->view.shape[2], b->view.shape[3]};
            for (int64_t x0 = 0; x0 < sh[0]; x0++)
                for (int64_t x1 = 0; x1 < sh[1]; x1++)
                    for (int64_t x2 = 0; x2 < sh[2]; x2++)
                        for (int64_t x3 = 0; x3 < sh[3]; x3++) {
                            unsigned char *e = b->img + x0 * b->view.stride[0] + x1 * b->view.stride[1] +
                                               x2 * b->view.stride[2] + x3 * b->view.stride[3];
                            float f = (c->dt == FG_DTYPE_E4M3 ? ref_e4m3_to_float(*e) : ref_e5m2_to_float(*e)) * amp +
                                      (i == 2 ? c->vmean : 0.f);
                            *e = c->dt == FG_DTYPE_E4M3 ? ref_float_to_e4m3(f, 1) : ref_float_to_e5m2(f, 1);
                        }
            CK(env->cu->cuMemcpyHtoD(b->dptr, b->img, (size_t)b->span * b->esize));
        }
    }
    if (dtype_is_fp8(c->dt) && c->descale) {
        /* Factors around 1 (0.5 .. 1.5), different per tensor and per (batch, kv head). */
        int64_t dsh[2] = {c->descale == 1 ? 1 : c->b, c->hkv};
        dbuf *ds[3] = {&r->dq, &r->dk, &r->dv};
        for (int i = 0; i < 3; i++) {
            if (c->descale == 1) dbuf_init(env, ds[i], FG_DTYPE_F32, 1, dsh, NULL, 0, 0);
            else dbuf_init(env, ds[i], FG_DTYPE_F32, 2, dsh, NULL, 0, 0);
            float *f = (float *)ds[i]->img;
            /* With scaled inputs the factors undo the scale, as a quantizer's amax / max_finite would:
             * the stored values saturate, the scores stay those of N(0,1) inputs. Scores of 1e10 (e5m2
             * at its maximum, undescaled) are beyond fp32's log2-domain softmax in any kernel. */
            const float undo = c->amp != 0.f ? 1.f / c->amp : 1.f;
            for (int64_t j = 0; j < ds[i]->span; j++) f[j] = (0.5f + (float)((j * 7 + i * 3) % 11) / 10.f) * undo;
            CK(env->cu->cuMemcpyHtoD(ds[i]->dptr, ds[i]->img, (size_t)ds[i]->span * 4));
        }
        r->args.q_descale = r->dq.view;
        r->args.k_descale = r->dk.view;
        r->args.v_descale = r->dv.view;
    }
    if (!c->no_lse) {
        make_strides(3, ls, c->strided, st);
        dbuf_init(env, &r->lse, FG_DTYPE_F32, 3, ls, st, GUARD, 0);
    }
    r->args.q = r->q.view;
    r->args.k = r->k.view;
    r->args.v = r->v.view;
    r->args.o = r->o.view;
    if (!c->no_lse)
        r->args.lse = r->lse.view;
    r->args.softmax_scale = c->scale;
    r->args.causal = c->causal;
}

/* Releases every buffer of r. */
void run_free(gpu_env *env, fwd_run *r) {
    dbuf_free(env, &r->dq);
    dbuf_free(env, &r->dk);
    dbuf_free(env, &r->dv);
    dbuf_free(env, &r->q);
    dbuf_free(env, &r->k);
    dbuf_free(env, &r->v);
    dbuf_free(env, &r->o);
    dbuf_free(env, &r->lse);
}

/* Whether a case's explicit tiles are the sm_90a family's (a producer warpgroup plus one consumer warpgroup
 * per 64 rows); other explicit tiles run the mma.sync family. */
static int wgmma_tiles(const fwd_case *c) {
    return c->tiles[0] && c->tiles[0] % 64 == 0 && c->tiles[2] == 4 * (c->tiles[0] / 64 + 1);
}

/* The explicit variant of a case for compute capability cc (sm_90a for the wgmma family's tiles on 9.0). */
static fg_spec explicit_spec(const fwd_case *c, int cc) {
    fg_spec s;
    fg_error e;
    fg_error_clear(&e);
    char text[FG_SPEC_NAME_MAX];
    snprintf(text, sizeof text, "kind=fwd arch=sm_%d%s dtype=%s head_dim=%d causal=%d block_m=%d block_n=%d "
             "warps=%d stages=%d%s", cc, cc == 90 && wgmma_tiles(c) ? "a" : "", dtype_name(c->dt), c->d, c->causal,
             c->tiles[0], c->tiles[1], c->tiles[2], c->tiles[3],
             dtype_is_fp8(c->dt) ? (c->out_f16 ? " out=fp16" : " out=bf16") : "");
    cr_assert_eq(spec_parse(text, &s, &e), FG_OK, "%s: %s", text, e.msg);
    return s;
}

/* A case's explicit sm_90a tiles must be ones the family takes: checked before any GPU is looked for, so
 * that a tile the rules came to refuse fails here (and in CI) instead of skipping on the GPU. */
void assert_sm90a_tiles_valid(const fwd_case *c) {
    if (!wgmma_tiles(c)) return;
    fg_spec s = explicit_spec(c, 90);
    fg_error e;
    fg_error_clear(&e);
    char name[200];
    case_name(c, name, sizeof name);
    cr_assert_eq(spec_validate(&s, &e), FG_OK, "%s: the sm_90a family refuses these tiles: %s", name, e.msg);
}

/* Poisons the outputs, calls fg_attention_fwd on the stream, waits, and downloads the outputs. */
void run_launch(gpu_env *env, fwd_run *r) {
    dbuf_poison(env, &r->o);
    if (!r->c.no_lse)
        dbuf_poison(env, &r->lse);
    gpu_poison_shared(env); /* and waits: the poison went through the legacy stream */
    char name[200];
    case_name(&r->c, name, sizeof name);
    if (r->c.tiles[0]) { /* an explicit variant, through the runtime's entry for the tuner */
        fg_error e;
        fg_error_clear(&e);
        /* Hopper's two families: the sm_90a tiles (wgmma_tiles) run as sm_90a, the mma.sync ones as sm_90 */
        const int cc = gpu_cc(env);
        if (wgmma_tiles(&r->c) && cc != 90)
            cr_skip_test("%s: tiles of the sm_90a family, which this GPU (sm_%d) does not run", name, cc);
        if (wgmma_tiles(&r->c) &&
            (env_is_zero("FLASHGEN_WGMMA") || (dtype_is_fp8(r->c.dt) && env_is_zero("FLASHGEN_WGMMA_FP8"))))
            cr_skip_test("%s: tiles of the sm_90a family, which FLASHGEN_WGMMA=0 / FLASHGEN_WGMMA_FP8=0 turn off", name);
        fg_spec s = explicit_spec(&r->c, cc);
        r->sum_rounded = spec_fp8_sum_rounded(&s);
        fg_status st = rt_fwd_with_spec(env->ctx, &s, &r->args, (void *)env->stream, &e);
        /* mma.sync tiles may not fit a smaller GPU's shared memory (skipped, as bwd_launch does); any other
         * refusal, and any of sm_90a tiles (one kind of part), is the test's error (assert_sm90a_tiles_valid
         * catches the latter without a GPU) */
        if (st == FG_ERR_UNSUPPORTED && !spec_is_wgmma(&s) && strstr(e.msg, "shared memory"))
            cr_skip_test("%s: %s", name, e.msg);
        cr_assert_eq(st, FG_OK, "%s: rt_fwd_with_spec returned %s: %s", name, fg_status_string(st), e.msg);
    } else {
        fg_spec s; /* the variant dispatch takes, for what the reference must model */
        fg_error e;
        fg_error_clear(&e);
        cr_assert_eq(rt_fwd_spec(env->ctx, &r->args, &s, &e), FG_OK, "%s: %s", name, e.msg);
        r->sum_rounded = spec_fp8_sum_rounded(&s);
        fg_status st = fg_attention_fwd(env->ctx, &r->args, (void *)env->stream);
        cr_assert_eq(st, FG_OK, "%s: fg_attention_fwd returned %s: %s", name, fg_status_string(st),
                     fg_last_error(env->ctx));
    }
    CK(env->cu->cuStreamSynchronize(env->stream));
    dbuf_download(env, &r->o);
    if (!r->c.no_lse)
        dbuf_download(env, &r->lse);
}

/* Judges the downloaded outputs: guard bands, padding, then every element against the reference. */
void run_verify(fwd_run *r) {
    char name[200], line[768];
    case_name(&r->c, name, sizeof name);
    check_guard(&r->o, "O");
    check_outside_view(&r->o, "O");
    if (!r->c.no_lse) {
        check_guard(&r->lse, "LSE");
        check_outside_view(&r->lse, "LSE");
    }
    ref_problem p = {.q = r->q.host, .k = r->k.host, .v = r->v.host, .softmax_scale = r->c.scale,
                     .causal = r->c.causal, .q_descale = r->dq.host, .k_descale = r->dk.host,
                     .v_descale = r->dv.host, .out_dtype = r->o.view.dtype, .fp8_sum_rounded = r->sum_rounded};
    ref_report rep;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_check_fwd(&p, &r->o.host, r->c.no_lse ? NULL : &r->lse.host, &rep, &e), FG_OK, "%s: %s", name,
                 e.msg);
    ref_report_format(&rep, line, sizeof line);
    fprintf(stderr, "gpu_fwd: %s: %s\n", name, line);
    cr_assert(rep.pass, "%s: %s", name, line);
}

/* Skips the calling test (closing env) on a GPU without FP8 mma.sync (below sm_89, or sm_87). */
void skip_without_fp8(gpu_env *env) {
    const int cc = gpu_cc(env);
    if (cc < 89 || cc == 87) {
        gpu_close(env);
        cr_skip_test("FP8 needs sm_89 or newer; this GPU is sm_%d", cc);
    }
}

/* The whole life of one case. */
void run_case(const fwd_case *c) {
    assert_sm90a_tiles_valid(c);
    gpu_env env;
    gpu_open(&env);
    if (dtype_is_fp8(c->dt)) skip_without_fp8(&env);
    fwd_run r;
    run_setup(&env, &r, c);
    run_launch(&env, &r);
    run_verify(&r);
    run_free(&env, &r);
    gpu_close(&env);
}

/* A contiguous case with the default scale and the LSE requested. */
fwd_case mk(fg_dtype dt, int b, int sq, int sk, int hq, int hkv, int d, int causal) {
    fwd_case c = {dt, b, sq, sk, hq, hkv, d, causal, 0.0f, 0, 0, {0, 0, 0, 0}, 0, 0, 0.0f, 0.0f};
    return c;
}

/* ------------------------------------------------------------------------------------------------ */
/* Other contexts, bundles and logs                                                                 */
/* ------------------------------------------------------------------------------------------------ */

/* Another flashgen context on device 0: cache_dir NULL disables the disk cache. */
fg_context *extra_context(const char *cache_dir, int strict, fg_log_fn log, void *user) {
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.cache_dir = cache_dir;
    opt.disable_disk_cache = cache_dir == NULL;
    opt.strict = strict;
    opt.log_level = FG_LOG_INFO;
    opt.log_fn = log;
    opt.log_user = user;
    fg_context *ctx = NULL;
    fg_status st = fg_context_create(&ctx, &opt);
    cr_assert_eq(st, FG_OK, "fg_context_create: %s", fg_last_error(NULL));
    return ctx;
}

/* The variant name on the first line of fg_explain's text ("variant NAME\n..."). */
void explained_variant(fg_context *ctx, const fg_fwd_args *a, char *name, size_t n, char *text, size_t tn) {
    cr_assert_eq(fg_explain(ctx, a, text, tn), FG_OK, "fg_explain: %s", fg_last_error(ctx));
    cr_assert_eq(strncmp(text, "variant ", 8), 0, "fg_explain text: %s", text);
    size_t len = strcspn(text + 8, "\n");
    cr_assert_lt(len, n);
    memcpy(name, text + 8, len);
    name[len] = '\0';
}

/* Compiles the variant s ahead of time into an in-memory bundle, as `flashgen bundle` does, and loads it
 * into ctx (which copies the bytes). */
void bundle_one_into(fg_context *ctx, const fg_spec *s) {
    char name[FG_SPEC_NAME_MAX];
    cr_assert_gt(spec_format(s, name, sizeof name), 0);
    fg_error e;
    fg_compile_result cres;
    cr_assert_eq(compile_spec(s, 0, &cres, &e), FG_OK, "%s", e.msg);
    fg_bundle b = {0};
    cr_assert_eq(bundle_add(&b, name, cres.cubin, cres.cubin_size, &e), FG_OK, "%s", e.msg);
    uint8_t *bytes;
    size_t nbytes;
    cr_assert_eq(bundle_serialize(&b, &bytes, &nbytes, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(fg_bundle_load_memory(ctx, bytes, nbytes), FG_OK, "%s", fg_last_error(ctx));
    free(bytes);
    bundle_free(&b);
    compile_result_free(&cres);
}

/* Runs r with ctx in place of env's own context, then checks every element. */
void launch_and_verify_with(gpu_env *env, fg_context *ctx, fwd_run *r) {
    fg_context *own = env->ctx;
    env->ctx = ctx;
    run_launch(env, r);
    env->ctx = own;
    run_verify(r);
}

/* Appends one log line to the log_sink `user` (for the compile-log tests). */
void collect(void *user, fg_log_level level, const char *msg) {
    log_sink *s = user;
    size_t used = strlen(s->text);
    snprintf(s->text + used, sizeof s->text - used, "%d %s\n", (int)level, msg);
}

/* ------------------------------------------------------------------------------------------------ */
/* One backward case                                                                                 */
/* ------------------------------------------------------------------------------------------------ */

/* c->tiles name the backward's variant (bwd::tiles); the forward that makes O and the LSE takes the policy's. */
void bwd_setup(gpu_env *env, bwd_run *r, const fwd_case *c, int deterministic) {
    memset(r, 0, sizeof *r);
    memcpy(r->tiles, c->tiles, sizeof r->tiles);
    fwd_case fc = *c;
    memset(fc.tiles, 0, sizeof fc.tiles);
    run_setup(env, &r->f, &fc);
    run_launch(env, &r->f);
    run_verify(&r->f);
    memcpy(r->f.c.tiles, c->tiles, sizeof r->f.c.tiles); /* for case_name (the forward ran the policy's tiles) */
    int64_t qs[4] = {c->b, c->sq, c->hq, c->d}, ks[4] = {c->b, c->sk, c->hkv, c->d}, st[4];
    make_strides(4, qs, c->strided, st);
    dbuf_init(env, &r->dout, c->dt, 4, qs, st, 0, 0);
    dbuf_upload_random(env, &r->dout, 0x61ull + (uint64_t)c->sq);
    dbuf_init(env, &r->dq, c->dt, 4, qs, st, GUARD, 0);
    make_strides(4, ks, c->strided, st);
    dbuf_init(env, &r->dk, c->dt, 4, ks, st, GUARD, 0);
    dbuf_init(env, &r->dv, c->dt, 4, ks, st, GUARD, 0);
    fg_bwd_args *a = &r->args;
    a->q = r->f.q.view, a->k = r->f.k.view, a->v = r->f.v.view, a->o = r->f.o.view, a->lse = r->f.lse.view;
    a->dout = r->dout.view, a->dq = r->dq.view, a->dk = r->dk.view, a->dv = r->dv.view;
    a->softmax_scale = c->scale;
    a->causal = c->causal;
    a->deterministic = deterministic;
    cr_assert_eq(fg_attention_bwd_workspace_size(env->ctx, a, &a->workspace_size), FG_OK, "%s",
                 fg_last_error(env->ctx));
    if (a->workspace_size) {
        CK(env->cu->cuMemAlloc(&r->ws, a->workspace_size));
        /* Garbage in the workspace: the kernels must initialize what they use. */
        CK(env->cu->cuMemsetD8(r->ws, 0xFF, a->workspace_size));
        a->workspace = (void *)(uintptr_t)r->ws;
    }
}

/* Poisons the gradients, runs the backward, downloads them. */
void bwd_launch(gpu_env *env, bwd_run *r) {
    dbuf *gs[3] = {&r->dq, &r->dk, &r->dv};
    for (int i = 0; i < 3; i++) dbuf_poison(env, gs[i]);
    gpu_poison_shared(env);
    char name[200];
    case_name(&r->f.c, name, sizeof name);
    fg_status st;
    if (r->tiles[0]) { /* an explicit mma.sync variant (bwd::tiles) */
        fg_spec s;
        fg_error e;
        fg_error_clear(&e);
        char text[FG_SPEC_NAME_MAX];
        snprintf(text, sizeof text, "kind=bwd arch=sm_%d dtype=%s head_dim=%d causal=%d deterministic=%d block_m=%d "
                 "block_n=%d warps=%d stages=%d", gpu_cc(env), dtype_name(r->f.c.dt), r->f.c.d, r->f.c.causal,
                 r->args.deterministic, r->tiles[0], r->tiles[1], r->tiles[2], r->tiles[3]);
        cr_assert_eq(spec_parse(text, &s, &e), FG_OK, "%s: %s", text, e.msg);
        st = rt_bwd_with_spec(env->ctx, &s, &r->args, (void *)env->stream, &e);
        if (st == FG_ERR_UNSUPPORTED && strstr(e.msg, "shared memory"))
            cr_skip_test("%s: %s", name, e.msg); /* a GPU with less of it */
        cr_assert_eq(st, FG_OK, "%s: rt_bwd_with_spec returned %s: %s", name, fg_status_string(st), e.msg);
    } else {
        st = fg_attention_bwd(env->ctx, &r->args, (void *)env->stream);
    }
    if (st == FG_ERR_UNSUPPORTED && r->f.c.d > 128 && strstr(fg_last_error(env->ctx), "shared memory"))
        cr_skip_test("%s: %s", name, fg_last_error(env->ctx)); /* d > 128 tiles on a GPU with less of it */
    cr_assert_eq(st, FG_OK, "%s: fg_attention_bwd returned %s: %s", name, fg_status_string(st), fg_last_error(env->ctx));
    CK(env->cu->cuStreamSynchronize(env->stream));
    for (int i = 0; i < 3; i++) dbuf_download(env, gs[i]);
}

/* fg_explain_bwd names the family the call will run: the sm_90a (wgmma) kernel or a mma.sync one (the
 * d > 128 tiles a GPU's shared memory cannot hold are skipped, as bwd_launch does). */
void bwd_expect_family(gpu_env *env, bwd_run *r, int sm90a, int tma) {
    char text[2048], name[200];
    case_name(&r->f.c, name, sizeof name);
    const fg_status st = fg_explain_bwd(env->ctx, &r->args, text, sizeof text);
    if (st == FG_ERR_UNSUPPORTED && r->f.c.d > 128 && strstr(fg_last_error(env->ctx), "shared memory"))
        cr_skip_test("%s: %s", name, fg_last_error(env->ctx));
    cr_assert_eq(st, FG_OK, "%s: fg_explain_bwd: %s", name, fg_last_error(env->ctx));
    cr_assert(strncmp(text, "variant ", 8) == 0 && strstr(text, "kind=bwd") && strstr(text, "workspace: "), "%s", text);
    cr_assert(sm90a == (strstr(text, "variant arch=sm_90a,") == text), "%s: the %s backward should run: %s", name,
              sm90a ? "sm_90a" : "mma.sync", text);
    if (tma >= 0) /* the mma.sync kernel's TMA loads (tma=1), where the caller says */
        cr_assert(tma == (strstr(text, ",tma=1,") != NULL && strstr(text, "loads by TMA") != NULL), "%s: %s", name, text);
}

void bwd_verify(bwd_run *r) {
    char name[200], line[1024];
    case_name(&r->f.c, name, sizeof name);
    static const char *const gnames[3] = {"dQ", "dK", "dV"};
    dbuf *gs[3] = {&r->dq, &r->dk, &r->dv};
    for (int i = 0; i < 3; i++) {
        check_guard(gs[i], gnames[i]);
        check_outside_view(gs[i], gnames[i]);
    }
    ref_bwd_problem p = {.fwd = {.q = r->f.q.host, .k = r->f.k.host, .v = r->f.v.host,
                                 .softmax_scale = r->f.c.scale, .causal = r->f.c.causal, .out_dtype = r->f.c.dt},
                         .o = r->f.o.host, .d_o = r->dout.host, .lse = r->f.lse.host};
    ref_bwd_report rep;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_check_bwd(&p, &r->dq.host, &r->dk.host, &r->dv.host, &rep, &e), FG_OK, "%s: %s", name, e.msg);
    ref_bwd_report_format(&rep, line, sizeof line);
    fprintf(stderr, "gpu_bwd: %s det=%d: %s\n", name, r->args.deterministic, line);
    cr_assert(rep.pass, "%s: %s", name, line);
}

void bwd_free(gpu_env *env, bwd_run *r) {
    dbuf_free(env, &r->dout);
    dbuf_free(env, &r->dq);
    dbuf_free(env, &r->dk);
    dbuf_free(env, &r->dv);
    if (r->ws) env->cu->cuMemFree(r->ws);
    run_free(env, &r->f);
}
