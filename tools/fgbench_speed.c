/* fgbench_speed.c: `fgbench speed`: the forward kernel timed on the benchmark protocol's shapes (16384
 * tokens = batch x seqlen, hidden 2048 = heads x head_dim, layout [b, s, h, d]), each configuration's
 * output checked first (fgbench_check.c) so a wrong kernel reports WRONG, never a speed; the table and
 * the CSV of the results. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "autotune/timing.h"
#include "core/csv.h"
#include "runtime/compile.h"
#include "tools/fgbench.h"

/* Registers and spills of variants, compiled once each just for the report. */
typedef struct variant_info {
    char name[FG_SPEC_NAME_MAX]; /* spec canonical text */
    int registers;               /* per thread; -1 when the compile failed */
    int spill;                   /* bytes of spill stores; -1 when unknown */
} variant_info;

/* The variants compiled for the report so far, so each is compiled once per run. */
typedef struct variant_cache {
    variant_info v[64]; /* one per variant seen (later ones are compiled every time) */
    int n;              /* used */
} variant_cache;

/* Looks the variant up in vc, else compiles it with compile_spec (once more: the runtime keeps no ptxas
 * report) and remembers registers and spills. A failed compile gives -1 and a warning. */
static void variant_registers(variant_cache *vc, const fg_spec *s, const char *name, int *regs, int *spill) {
    for (int i = 0; i < vc->n; i++)
        if (strcmp(vc->v[i].name, name) == 0) {
            *regs = vc->v[i].registers;
            *spill = vc->v[i].spill;
            return;
        }
    fg_compile_result cr;
    fg_error e;
    fg_error_clear(&e);
    *regs = *spill = -1;
    if (compile_spec(s, 0, &cr, &e) == FG_OK) {
        *regs = cr.registers;
        *spill = cr.spill_stores;
    } else {
        say("warning: compiling %s for its register count failed: %s", name, e.msg);
    }
    compile_result_free(&cr);
    if (vc->n < (int)(sizeof vc->v / sizeof vc->v[0])) {
        variant_info *v = &vc->v[vc->n++];
        snprintf(v->name, sizeof v->name, "%s", name);
        v->registers = *regs;
        v->spill = *spill;
    }
}

/* What a speed timing launches: fg_attention_fwd on input set (first + i) mod copies. */
typedef struct speed_launch {
    fg_context *ctx;        /* the context */
    const speed_cfg *cfg;   /* the configuration */
    const speed_bufs *B;    /* the input sets and the stream */
    int first;              /* the set of launch 0 */
    int warmup;             /* launches below this index are warm-up (for the failure's sentence) */
} speed_launch;

/* launch_fn of `speed`. */
static fg_status speed_launch_one(void *user, int i, fg_error *err) {
    const speed_launch *l = user;
    fg_fwd_args a = cfg_args(l->cfg, l->B, (l->first + i) % l->B->copies);
    fg_status st = fg_attention_fwd(l->ctx, &a, l->B->stream);
    if (st == FG_OK) return FG_OK;
    return fg_fail(err, st, "fg_attention_fwd%s: %s", l->warmup < 0 ? "" : i < l->warmup ? " (warm-up)" : " (timed)",
                   fg_last_error(l->ctx));
}

/* Prepares, checks and times configuration r->cfg. A wrong output sets r->state = RES_WRONG and returns
 * FG_OK; any failure returns its status (FG_ERR_CUDA: the CUDA context may be unusable) with the
 * sentence in err; success sets RES_OK and the timings. */
static fg_status bench_one(const bench_device *dev, fg_context *ctx, speed_bufs *B, variant_cache *vc,
                           const speed_opts *o, speed_result *r, fg_error *err) {
    const fg_cuda_api *cu = dev->cu;
    const speed_cfg *c = &r->cfg;
    fg_fwd_args a0 = cfg_args(c, B, 0);
    fg_status st;

    if ((st = describe_variant(ctx, &a0, r->variant, &r->spec, &r->origin, err)) != FG_OK) return st;
    r->smem = spec_smem_bytes(&r->spec);
    if (strcmp(r->origin, "JIT") == 0) {
        fprintf(stderr, "%s: compiling %s with NVRTC ...\n", bench_prog, r->variant);
        fflush(stderr);
    }
    double t0 = now_seconds();
    st = fg_prepare(ctx, &a0);
    r->prepare_s = now_seconds() - t0;
    if (st != FG_OK) return fg_fail(err, st, "fg_prepare: %s", fg_last_error(ctx));
    variant_registers(vc, &r->spec, r->variant, &r->registers, &r->spill);

    /* The checked launch, on set 0's poisoned outputs, timed alone to size the warm-up. Memsets run on the
     * legacy stream, which the non-blocking launch stream does not wait for: synchronize the context first. */
    size_t n = cfg_elems(c), nl = cfg_lse_elems(c);
    CK(cu->cuMemsetD8(B->o[0], 0xFF, n * 2));
    CK(cu->cuMemsetD8(B->lse[0], 0xFF, nl * sizeof(float)));
    CK(cu->cuCtxSynchronize());
    speed_launch first = {ctx, c, B, 0, -1};
    launch_times t;
    if ((st = time_launches(cu, B->stream, 0, 1, speed_launch_one, &first, &t, err)) != FG_OK) return st;
    double first_ms = t.median;
    CK(cu->cuMemcpyDtoH(B->ho, B->o[0], n * 2));
    CK(cu->cuMemcpyDtoH(B->hlse, B->lse[0], nl * sizeof(float)));
    int pass = 0;
    if ((st = check_output(B, r, &pass, err)) != FG_OK) return st;
    if (!pass) {
        r->state = RES_WRONG;
        return FG_OK;
    }

    /* Warm-up of at least WARMUP_MIN_MS, then the timed launches (time_launches); sets rotate from launch to
     * launch, starting after set 0. */
    int warm = o->warmup;
    if (first_ms > 0 && WARMUP_MIN_MS / first_ms > warm)
        warm = WARMUP_MIN_MS / first_ms > WARMUP_MAX ? WARMUP_MAX : (int)ceil(WARMUP_MIN_MS / first_ms);
    r->warmup = warm;
    speed_launch timed = {ctx, c, B, 1 % B->copies, warm};
    if ((st = time_launches(cu, B->stream, warm, o->iters, speed_launch_one, &timed, &t, err)) != FG_OK) return st;
    r->ms_median = t.median;
    r->ms_min = t.min;
    r->ms_max = t.max;
    r->tflops = r->ms_median > 0 ? cfg_flops(c) / (r->ms_median * 1e-3) / 1e12 : 0.0;
    r->state = RES_OK;
    return FG_OK;
fail:
    return err->status;
}

/* ------------------------------------------------------------------ speed: the sweep */

/* "128x64 w8 s2": the tiles of a spec. */
static void tiles_text(const fg_spec *s, char *buf, size_t n) {
    snprintf(buf, n, "%dx%d w%d s%d", s->block_m, s->block_n, s->warps, s->stages);
}

/* Prints the result table (and the sentence of each row that did not end OK). */
static void print_table(const speed_result *res, int n) {
    printf("\n%-5s %4s %-6s %6s %5s %5s  %-14s %10s %10s %8s %5s %5s %8s  %s\n", "dtype", "d", "mask", "seqlen", "batch",
           "heads", "tiles", "median ms", "min ms", "TFLOP/s", "regs", "spill", "smem KiB", "check");
    for (int i = 0; i < n; i++) {
        const speed_result *r = &res[i];
        const speed_cfg *c = &r->cfg;
        char tiles[48] = "-", regs[16] = "-", spill[16] = "-", smem[16] = "-";
        if (r->variant[0]) {
            tiles_text(&r->spec, tiles, sizeof tiles);
            snprintf(smem, sizeof smem, "%.1f", (double)r->smem / 1024.0);
            if (r->registers >= 0) snprintf(regs, sizeof regs, "%d", r->registers);
            if (r->spill >= 0) snprintf(spill, sizeof spill, "%d", r->spill);
        }
        printf("%-5s %4d %-6s %6d %5d %5d  %-14s ", dtype_name(c->dtype), c->head_dim, c->causal ? "causal" : "none",
               c->seqlen, c->batch, c->heads, tiles);
        if (r->state == RES_OK)
            printf("%10.4f %10.4f %8.1f ", r->ms_median, r->ms_min, r->tflops);
        else
            printf("%10s %10s %8s ", "-", "-", "-");
        static const char *const state_word[] = {"SKIPPED", "ok", "WRONG", "ERROR"};
        printf("%5s %5s %8s  %s\n", regs, spill, smem, state_word[r->state]);
    }
    int notes = 0;
    for (int i = 0; i < n; i++) {
        const speed_result *r = &res[i];
        if (r->state == RES_OK || !r->message[0]) continue;
        if (notes++ == 0) printf("\n");
        printf("%s d=%d %s seqlen=%d: %s: %s\n", dtype_name(r->cfg.dtype), r->cfg.head_dim,
               r->cfg.causal ? "causal" : "none", r->cfg.seqlen, r->state == RES_WRONG ? "WRONG" : "ERROR", r->message);
    }
}

/* Writes the results as CSV to path (one header line, one line per configuration). */
static fg_status write_csv(const char *path, const speed_result *res, int n, const speed_opts *o, int copies,
                           fg_error *err) {
    FILE *f = fopen(path, "w");
    if (!f) return fg_fail(err, FG_ERR_IO, "--csv %s: cannot create it: %s", path, strerror(errno));
    fprintf(f, "dtype,head_dim,causal,seqlen,batch,heads,variant,block_m,block_n,warps,stages,status,ms_median,ms_min,"
               "ms_max,tflops,registers,spill_bytes,smem_bytes,max_err,bound,iters,warmup,copies\n");
    static const char *const status[] = {"skipped", "ok", "wrong", "error"};
    for (int i = 0; i < n; i++) {
        const speed_result *r = &res[i];
        const speed_cfg *c = &r->cfg;
        fprintf(f, "%s,%d,%d,%d,%d,%d,", dtype_name(c->dtype), c->head_dim, c->causal, c->seqlen, c->batch, c->heads);
        csv_field(f, r->variant);
        fprintf(f, ",%d,%d,%d,%d,%s,", r->spec.block_m, r->spec.block_n, r->spec.warps, r->spec.stages,
                status[r->state]);
        if (r->state == RES_OK)
            fprintf(f, "%.6f,%.6f,%.6f,%.3f,", r->ms_median, r->ms_min, r->ms_max, r->tflops);
        else
            fprintf(f, ",,,,");
        fprintf(f, "%d,%d,%zu,%.6g,%.6g,%d,%d,%d\n", r->registers, r->spill, r->smem, r->max_err, r->bound, o->iters,
                r->warmup, copies);
    }
    if (csv_close(f) != 0) return fg_fail(err, FG_ERR_IO, "--csv %s: writing it failed: %s", path, strerror(errno));
    return FG_OK;
}

/* How many input sets to rotate: enough that the data touched between two uses of one set is at least
 * three times the L2 (and at least two sets, so consecutive launches never share inputs), within half the
 * device memory. Returns the count and says why when only one set fits. */
static int choose_copies(const bench_device *dev, size_t set_min, size_t set_max) {
    double l2 = dev->l2_bytes > 0 ? (double)dev->l2_bytes : 0.0;
    double want = set_min > 0 ? ceil(3.0 * l2 / (double)set_min) : 2.0;
    int copies = want < 2.0 ? 2 : (want > MAX_COPIES ? MAX_COPIES : (int)want);
    while (copies > 1 && (double)copies * (double)set_max > 0.5 * (double)dev->total_mem) copies--;
    if (copies == 1)
        say(bench_mode, "note: one input set is %.0f MiB; two would exceed half of the device's %.0f MiB, so the same set is "
            "reused and the tail of one launch's inputs may still be in L2 for the next",
            (double)set_max / 1048576.0, (double)dev->total_mem / 1048576.0);
    return copies;
}

/* run_speed: see fgbench.h. */
int run_speed(const bench_device *dev, const speed_opts *o) {
    const fg_cuda_api *cu = dev->cu;
    fg_error e;
    fg_error_clear(&e);
    fg_error *err = &e;
    int status = EXIT_FAIL;
    fg_context *ctx = NULL;
    speed_bufs B;
    memset(&B, 0, sizeof B);
    variant_cache *vc = calloc(1, sizeof *vc);
    int ncfg = o->ndtypes * o->nhead_dims * o->ncausals * o->nseqlens;
    speed_result *res = calloc((size_t)ncfg, sizeof *res);
    if (!vc || !res) {
        fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for %d results", ncfg);
        goto fail;
    }

    /* The configurations, dtype outermost (inputs are filled once per dtype), and the buffer sizes. */
    int n = 0;
    size_t set_min = SIZE_MAX, set_max = 0;
    for (int a = 0; a < o->ndtypes; a++)
        for (int b = 0; b < o->nhead_dims; b++)
            for (int c = 0; c < o->ncausals; c++)
                for (int s = 0; s < o->nseqlens; s++) {
                    speed_cfg *x = &res[n++].cfg;
                    x->dtype = o->dtypes[a];
                    x->head_dim = o->head_dims[b];
                    x->causal = o->causals[c];
                    x->seqlen = o->seqlens[s];
                    x->batch = PROTO_TOKENS / x->seqlen > 0 ? PROTO_TOKENS / x->seqlen : 1;
                    x->heads = PROTO_HIDDEN / x->head_dim > 0 ? PROTO_HIDDEN / x->head_dim : 1;
                    size_t ne = cfg_elems(x), nl = cfg_lse_elems(x), set = 4 * ne * 2 + nl * sizeof(float);
                    if (ne > B.n_max) B.n_max = ne;
                    if (nl > B.lse_max) B.lse_max = nl;
                    if (set < set_min) set_min = set;
                    if (set > set_max) set_max = set;
                }
    B.n_fill = (B.n_max + 63) / 64 * 64;
    B.copies = choose_copies(dev, set_min, set_max);

    B.hq = malloc(B.n_fill * 2);
    B.hk = malloc(B.n_fill * 2);
    B.hv = malloc(B.n_fill * 2);
    B.ho = malloc(B.n_max * 2);
    B.hlse = malloc(B.lse_max * sizeof(float));
    if (!B.hq || !B.hk || !B.hv || !B.ho || !B.hlse) {
        fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for inputs of %zu elements", B.n_fill);
        goto fail;
    }
    if (bench_context(dev, NULL, &ctx, err) != FG_OK) goto fail;
    CK(cu->cuStreamCreate(&B.stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < B.copies; i++) {
        CK(cu->cuMemAlloc(&B.q[i], B.n_max * 2));
        CK(cu->cuMemAlloc(&B.k[i], B.n_max * 2));
        CK(cu->cuMemAlloc(&B.v[i], B.n_max * 2));
        CK(cu->cuMemAlloc(&B.o[i], B.n_max * 2));
        CK(cu->cuMemAlloc(&B.lse[i], B.lse_max * sizeof(float)));
    }
    print_device(dev);
    printf("%s: protocol: batch = %d / seqlen, heads = %d / head_dim, layout [b, s, h, d], LSE written; median of %d "
           "timed launches after >= %d warm-up launches and >= %.0f ms; %d input set%s of %.0f MiB %s "
           "(L2 %.0f MiB)\n",
           bench_prog, PROTO_TOKENS, PROTO_HIDDEN, o->iters, o->warmup, WARMUP_MIN_MS, B.copies, B.copies == 1 ? "" : "s",
           (double)set_max / 1048576.0, B.copies == 1 ? "(not rotated)" : "rotated", dev->l2_bytes / 1048576.0);
    fflush(stdout);

    int aborted = 0, all_ok = 1;
    int filled = -1; /* the dtype the inputs hold, -1 before the first fill */
    for (int i = 0; i < ncfg && !aborted; i++) {
        speed_result *r = &res[i];
        if ((int)r->cfg.dtype != filled) {
            /* The inputs of this dtype: flat N(0, 1) arrays read by every configuration as its own shape. */
            double t0 = now_seconds();
            fg_tensor flat[3] = {bshd(B.hq, r->cfg.dtype, 1, (int64_t)(B.n_fill / 64), 1, 64),
                                 bshd(B.hk, r->cfg.dtype, 1, (int64_t)(B.n_fill / 64), 1, 64),
                                 bshd(B.hv, r->cfg.dtype, 1, (int64_t)(B.n_fill / 64), 1, 64)};
            for (int t = 0; t < 3; t++)
                if (ref_fill_normal(&flat[t], INPUT_SEEDS + (uint64_t)t, err) != FG_OK) goto fail;
            for (int c = 0; c < B.copies; c++) {
                CK(cu->cuMemcpyHtoD(B.q[c], B.hq, B.n_max * 2));
                CK(cu->cuMemcpyHtoD(B.k[c], B.hk, B.n_max * 2));
                CK(cu->cuMemcpyHtoD(B.v[c], B.hv, B.n_max * 2));
            }
            CK(cu->cuCtxSynchronize()); /* pageable uploads may still be in flight when they return */
            filled = (int)r->cfg.dtype;
            fprintf(stderr, "%s: %s inputs filled and uploaded in %.1f s\n", bench_prog, dtype_name(r->cfg.dtype),
                    now_seconds() - t0);
        }
        fg_error cerr;
        fg_error_clear(&cerr);
        fg_status st = bench_one(dev, ctx, &B, vc, o, r, &cerr);
        const speed_cfg *c = &r->cfg;
        fprintf(stderr, "%s: [%d/%d] %s d=%d %s seqlen=%d (batch %d, heads %d): ", bench_prog, i + 1, ncfg,
                dtype_name(c->dtype), c->head_dim, c->causal ? "causal" : "none", c->seqlen, c->batch, c->heads);
        if (st != FG_OK) {
            r->state = RES_ERROR;
            snprintf(r->message, sizeof r->message, "%s", cerr.msg);
            fprintf(stderr, "ERROR: %s\n", cerr.msg);
            all_ok = 0;
            if (st == FG_ERR_CUDA) { /* a CUDA error may leave the context unusable: stop here */
                say(bench_mode, "stopping the sweep after a CUDA error; the rest is not measured");
                aborted = 1;
            }
        } else {
            fprintf(stderr, "prepare %.2f s (%s), check %s in %.1f s (%s)", r->prepare_s, r->origin,
                    r->state == RES_OK ? "ok" : "WRONG", r->check_s, r->message);
            if (r->state == RES_OK)
                fprintf(stderr, ", %.4f ms, %.1f TFLOP/s\n", r->ms_median, r->tflops);
            else
                fprintf(stderr, "\n");
            if (r->state != RES_OK) all_ok = 0;
        }
    }
    print_table(res, ncfg);
    if (o->csv) {
        if (write_csv(o->csv, res, ncfg, o, B.copies, err) != FG_OK) goto fail;
        printf("\nwrote %s\n", o->csv);
    }
    status = all_ok && !aborted ? EXIT_OK : EXIT_FAIL;
    goto cleanup;
fail:
    say(bench_mode, "%s", err->msg);
cleanup:
    if (B.stream) RELEASE(cu->cuStreamDestroy(B.stream));
    for (int i = 0; i < MAX_COPIES; i++) {
        if (B.q[i]) RELEASE(cu->cuMemFree(B.q[i]));
        if (B.k[i]) RELEASE(cu->cuMemFree(B.k[i]));
        if (B.v[i]) RELEASE(cu->cuMemFree(B.v[i]));
        if (B.o[i]) RELEASE(cu->cuMemFree(B.o[i]));
        if (B.lse[i]) RELEASE(cu->cuMemFree(B.lse[i]));
    }
    fg_context_destroy(ctx);
    free(B.hq);
    free(B.hk);
    free(B.hv);
    free(B.ho);
    free(B.hlse);
    free(res);
    free(vc);
    return status;
}

