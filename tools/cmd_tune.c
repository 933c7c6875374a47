/* cmd_tune.c: `flashgen tune`, the command: its usage, options and `--show`, and the GPU side of the
 * sweep (sweep_bench): each problem's tensors, from cli_gpu.c, and the check of each candidate's output
 * against the CPU reference, which autotune does not link. The sweep itself is autotune/sweep.c, the
 * multi-GPU workers and the database files autotune/shard.c. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "autotune/shard.h"
#include "autotune/space.h"
#include "autotune/sweep.h"
#include "core/knobs.h"
#include "flashgen.h"
#include "generator/spec.h"
#include "reference/reference.h"
#include "runtime/cache.h"
#include "runtime/call_args.h"
#include "runtime/runtime.h"
#include "runtime/tunedb.h"
#include "tools/cli.h"

/* ------------------------------------------------------------------ usage */

static const char usage_tune[] =
    "usage: flashgen tune SPACE [--device N|LIST|all] [--budget SECONDS] [--db FILE] [-j N] [--iters N]\n"
    "                     [--allow-spills]\n"
    "       flashgen tune --show [FILE] [--csv]\n"
    "\n"
    "Times every candidate of the tuning space SPACE (a Lua file calling space{...}, for example\n"
    "configs/tune_fwd.lua) on one GPU and records each one in that GPU's tuning database; from then on\n"
    "fg_attention_fwd runs the fastest variant measured for the nearest problem bucket. A space of\n"
    "kind = \"bwd\" (configs/tune_bwd.lua) times the backward's mma.sync tiles, which fg_attention_bwd\n"
    "then runs outside its deterministic mode (the sm_90a backward keeps its one tile): each candidate is\n"
    "first checked on a small problem of the same class (batch 1, two K/V heads, lengths up to 333),\n"
    "every element of dQ, dK and dV against the CPU references, then timed at the space's size\n"
    "(TFLOP/s at 2.5x the forward's FLOPs).\n"
    "\n"
    "Candidates that validation refuses, or whose shared memory the GPU cannot give, are recorded as\n"
    "refused with the rule's sentence. The others are compiled with NVRTC on N threads while the GPU\n"
    "times the ones already compiled (their cubins go to the disk cache, where the timing loads them;\n"
    "`flashgen cache clear` removes them). One that spills registers is recorded as spilled, one that\n"
    "fails to compile or launch as failed. Each remaining candidate runs once on random N(0,1) inputs\n"
    "(FP8: V N(1,1), as in `run`) with its output poisoned with NaN, and a slice of the output (the\n"
    "first batch, the first two heads, the last rows up to a fixed CPU cost) is compared with the CPU\n"
    "reference by `run`'s rule; a mismatch is recorded as wrong and never timed. Then 3 warm-up and\n"
    "--iters timed launches on a non-blocking stream, one CUDA event between consecutive launches;\n"
    "the median time and TFLOP/s (4*b*h*sq*sk*d, half when causal) are recorded. Inputs smaller than\n"
    "the GPU's L2 cache are rotated over several copies so no launch finds them cached. A problem's\n"
    "batch x heads is split as heads = 2048 / head_dim (a model width of 2048), batch = batch_heads /\n"
    "heads.\n"
    "\n"
    "The database is saved atomically after each problem, and candidates it already holds are skipped:\n"
    "an interrupted or budget-limited sweep resumes when the same command runs again. Ctrl-C (or\n"
    "SIGTERM) finishes the current candidate, saves and exits 1 (a second one stops at once). A database made for\n"
    "another GPU, driver, NVRTC or flashgen version, or a corrupt one, is moved aside to\n"
    "FILE.bad-<date>-<time> (never overwritten) and a new one is begun. Progress goes to stderr, one\n"
    "updating line on a terminal, else a line per candidate; at the end the results for this space's\n"
    "problems are printed as a table. Exit status 0 when every candidate is recorded (wrong and failed\n"
    "candidates are results) or the budget ran out; 1 on an error, an interrupt, or without a GPU.\n"
    "\n"
    "      --device N      CUDA device ordinal (default 0). A list (0,2,3) or `all` runs one worker process\n"
    "                      per GPU: GPUs of one model share its database and the space's problems are\n"
    "                      dealt among them; each worker writes FILE.gpu<N>.w<K>.part, which the parent\n"
    "                      merges into the database when the workers end (a part a killed run left is\n"
    "                      merged by the next run). Ctrl-C reaches the parent, which stops the workers\n"
    "                      after their current candidate.\n"
    "      --budget S      start no new candidate after S seconds; save and exit 0\n"
    "      --allow-spills  time candidates that spill registers to local memory too (the note gives the\n"
    "                      bytes) instead of recording them as spilled: a few bytes of loop-invariant values\n"
    "                      reloaded from L1 can cost less than the tile they allow. Candidates the database\n"
    "                      already records as spilled are kept as they are (use a new --db to time them)\n"
    "      --db FILE       the database (default: tune-<gpu>-sm<arch>-<sms>sm.lua in the disk cache\n"
    "                      directory, where fg_context_create looks for it)\n"
    "  -j, --jobs N        parallel NVRTC compiles (default: the number of online CPUs)\n"
    "      --iters N       timed launches per candidate (default 20)\n"
    "      --csv           with --show: CSV instead of the table (for bench/tune_plot.py's heat maps)\n"
    "      --show [FILE]   print the database FILE (default: --db, else this GPU's) as a table and exit;\n"
    "                      with a FILE no GPU is needed, and the file is not checked against one\n";

/* ------------------------------------------------------------------ the GPU side of a sweep */

/* The current problem's GPU side (the sweep_bench user of `tune`). */
typedef struct tune_gpu {
    problem p;                /* the shape it is timed at */
    fwd_buffers B;            /* inputs and outputs, allocated at its first candidate that runs */
    int bwd;                  /* the problem's kind is "bwd" */
    problem pc;               /* kind "bwd": the small problem of the same class each candidate is checked on */
    bwd_buffers BB, BC;       /* kind "bwd": the timed problem's tensors and the check problem's */
    int64_t check_heads;      /* query heads of batch 0 the check covers */
    int64_t check_row0;       /* first query row it covers (it covers check_row0 .. seqlen_q - 1) */
    char l2note[128];         /* how the inputs stand to L2, for the notes; "" when they are far larger */
    int serve;                /* the problem's kind is "serve": candidates run fg_attention_fwd_varlen's kernel */
    CUdeviceptr ws;           /* kind "serve": the split partials of the problem's largest split count */
    size_t ws_size;
} tune_gpu;

/* kind "serve": the serving call on copy i of the problem's dense tensors (a dense cache of seqlen_k keys, each
 * sequence's seqlen_q queries), with the candidate's split count and the workspace. */
static fg_status tune_serve(const tune_gpu *G, sweep_run *R, const fg_spec *spec, int i, fg_error *err) {
    const fg_fwd_args *f = &G->B.dev[i % G->B.ncopies];
    fg_varlen_args a;
    fg_varlen_args_init(&a);
    a.q = f->q, a.k = f->k, a.v = f->v, a.o = f->o, a.lse = f->lse;
    a.causal = f->causal;
    a.softmax_scale = f->softmax_scale;
    a.workspace = (void *)(uintptr_t)G->ws;
    a.workspace_size = G->ws_size;
    return rt_varlen_with_spec(R->ctx, spec, &a, R->stream, err);
}

/* The shape pb is timed at: heads_q = 2048 / head_dim (a model width of 2048), capped to batch_heads
 * and lowered to a multiple of the GQA ratio that divides batch_heads; batch = batch_heads / heads_q.
 * Returns 0, or -1 when batch_heads is not a positive multiple of the ratio (space_load refuses that). */
static int tune_shape(const fg_tune_problem *pb, problem *p) {
    int d = pb->cls.head_dim, g = pb->cls.gqa, bh = pb->batch_heads;
    if (d < 1 || g < 1 || bh < g || bh % g != 0) return -1;
    int h = 2048 / d;
    if (h > bh) h = bh;
    h -= h % g;
    if (h < g) h = g;
    while (bh % h != 0) h -= g; /* stops at g at the latest, which divides bh */
    memset(p, 0, sizeof *p);
    p->dtype = pb->cls.dtype;
    p->out_dtype = FG_DTYPE_BF16; /* FP8 classes are timed with bf16 O, as their candidates are built */
    p->batch = bh / h;
    p->seqlen_q = pb->seqlen_q;
    p->seqlen_k = pb->seqlen_k;
    p->heads = h;
    p->heads_kv = h / g;
    p->head_dim = d;
    p->causal = pb->cls.causal != 0;
    return 0;
}

/* sweep_bench.check_shapes of `tune`: checks, before any GPU work, that every problem of the space can be laid out and called (grid limits,
 * sizes). Returns 0, or 1 after printing "SPACE:line: ..." for the first that cannot. */
static int tune_check_shapes(void *user, const char *space_path, const fg_tune_space *sp) {
    (void)user;
    for (int i = 0; i < sp->count; i++) {
        const fg_tune_problem *pb = &sp->problems[i];
        problem p;
        if (tune_shape(pb, &p) != 0) {
            say("tune", "%s:%d: batch_heads %d is not a positive multiple of gqa %d", space_path, pb->line,
                pb->batch_heads, pb->cls.gqa);
            return 1;
        }
        fg_error err;
        fg_error_clear(&err);
        fg_status st;
        if (pb->cls.kind == FG_KIND_BWD) {
            fg_bwd_args a;
            bwd_problem_args(&p, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &a);
            st = rt_check_bwd_args(&a, 0, 0, &err);
        } else {
            fg_fwd_args a;
            problem_args(&p, NULL, NULL, NULL, NULL, NULL, &a);
            st = rt_check_fwd_args(&a, 0, &err);
        }
        if (st != FG_OK) {
            say("tune", "%s:%d: the problem (batch %lld x heads %lld, seqlen_q %lld, seqlen_k %lld, head_dim %lld) "
                "cannot be run: %s", space_path, pb->line, p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim, err.msg);
            return 1;
        }
    }
    return 0;
}

/* The small problem a backward candidate is checked on, for the class of G->p: batch 1, two K/V heads with
 * the class's GQA ratio, lengths up to 333 and 211 that keep the class's relation (sq = sk, sq < sk or
 * sq > sk) and are multiples of no tile size, so tails, partial tiles and (causal, sq > sk) rows without
 * keys are all judged, by the full CPU references (ref_check_bwd) in a fraction of a second. */
static void tune_bwd_check_shape(const problem *p, problem *c) {
    *c = *p;
    c->batch = 1;
    c->heads_kv = 2;
    c->heads = 2 * (p->heads / p->heads_kv);
    if (p->seqlen_q == p->seqlen_k) {
        c->seqlen_q = c->seqlen_k = p->seqlen_q < 333 ? p->seqlen_q : 333;
    } else if (p->seqlen_q < p->seqlen_k) {
        c->seqlen_q = p->seqlen_q < 211 ? p->seqlen_q : 211;
        c->seqlen_k = p->seqlen_k < 333 ? p->seqlen_k : 333;
    } else {
        c->seqlen_q = p->seqlen_q < 333 ? p->seqlen_q : 333;
        c->seqlen_k = p->seqlen_k < 211 ? p->seqlen_k : 211;
    }
}

/* tune_gpu_prepare for kind "bwd": the timed problem's tensors (one copy: the backward's tensors are several
 * times the forward's, and a problem smaller than L2 is said to be) and the check problem's. */
static int tune_gpu_prepare_bwd(sweep_run *R, tune_gpu *G, int pi) {
    const fg_tune_problem *pb = &R->space->problems[pi];
    const double bytes = bwd_copy_bytes(&G->p), mib = 1024.0 * 1024.0;
    tune_bwd_check_shape(&G->p, &G->pc);
    fg_error err;
    fg_error_clear(&err);
    if (bwd_buffers_init(R->ctx, &G->p, 1000 + (uint64_t)pi, &G->BB, &err) != FG_OK ||
        bwd_buffers_init(R->ctx, &G->pc, 5000 + (uint64_t)pi, &G->BC, &err) != FG_OK) {
        bwd_buffers_free(R->cu, &G->BB);
        bwd_buffers_free(R->cu, &G->BC);
        sweep_print(R, SWEEP_ERR, "%s:%d: cannot set up the backward problem's tensors (%.1f MiB): %s", R->space_path,
                   pb->line, bytes / mib, err.msg);
        return -1;
    }
    if (bytes < R->l2_bytes)
        snprintf(G->l2note, sizeof G->l2note, "tensors (%.1f MiB) fit in L2: times may be optimistic", bytes / mib);
    else
        G->l2note[0] = '\0';
    sweep_print(R, SWEEP_INFO, "timing the backward at batch %lld x heads %lld (heads_kv %lld): %.1f MiB of tensors and "
               "%.1f MiB of workspace; each candidate checked first at batch 1 x heads %lld, seqlen_q %lld, seqlen_k %lld",
               G->p.batch, G->p.heads, G->p.heads_kv, bytes / mib, (double)G->BB.ws_bytes / mib, G->pc.heads,
               G->pc.seqlen_q, G->pc.seqlen_k);
    return 0;
}

/* tune_gpu_prepare for kind "fwd": the problem's copies (see tune_gpu_prepare). */
static int tune_gpu_prepare_fwd(sweep_run *R, tune_gpu *G, int pi) {
    const fg_tune_problem *pb = &R->space->problems[pi];
    double copy = fwd_copy_bytes(&G->p), mib = 1024.0 * 1024.0;
    int want = 1;
    if (copy < R->l2_bytes) {
        double n = 1.0 + ceil(R->l2_bytes / copy);
        want = n > FWD_MAX_COPIES ? FWD_MAX_COPIES : (int)n;
    }
    fg_error err;
    fg_error_clear(&err);
    if (fwd_buffers_init(R->cu, &G->p, 1000 + (uint64_t)pi, want, &G->B, &err) != FG_OK) {
        fwd_buffers_free(R->cu, &G->B);
        sweep_print(R, SWEEP_ERR, "%s:%d: cannot set up the problem's tensors (%.1f MiB per copy): %s", R->space_path,
                   pb->line, copy / mib, err.msg);
        return -1;
    }
    int n = G->B.ncopies;
    if (copy >= R->l2_bytes) G->l2note[0] = '\0';
    else if ((n - 1) * copy >= R->l2_bytes) snprintf(G->l2note, sizeof G->l2note, "inputs rotated over %d copies", n);
    else
        snprintf(G->l2note, sizeof G->l2note, "inputs (%.1f MiB, %d cop%s) fit in L2: times may be optimistic",
                 copy / mib, n, n == 1 ? "y" : "ies");
    sweep_print(R, SWEEP_INFO, "timing at batch %lld x heads %lld (heads_kv %lld): %.1f MiB of tensors%s%s", G->p.batch,
               G->p.heads, G->p.heads_kv, copy / mib, G->l2note[0] ? "; " : "", G->l2note);
    return 0;
}


/* sweep_bench.prepare of `tune`: the shape (tune_shape) and the slice the check covers, then the tensors.
 * One copy when a copy is at least the L2 size; else enough copies (up to FWD_MAX_COPIES) that between two
 * uses of one copy the others have passed a whole L2 through the cache (kind "bwd": tune_gpu_prepare_bwd). */
static int tune_gpu_prepare(void *user, sweep_run *R, int pi, double *flops, char *l2note, size_t nnote) {
    tune_gpu *G = user;
    const fg_tune_problem *pb = &R->space->problems[pi];
    memset(G, 0, sizeof *G);
    tune_shape(pb, &G->p); /* checked by tune_check_shapes */
    G->bwd = pb->cls.kind == FG_KIND_BWD;
    /* The check covers batch 0, two heads and the last rows up to about 2^28 multiply-adds per reference,
     * a fraction of a second on the CPU whatever the problem's size. */
    G->check_heads = G->p.heads < 2 ? G->p.heads : 2;
    int64_t rows = ((int64_t)1 << 28) / (G->check_heads * G->p.seqlen_k * G->p.head_dim);
    if (rows < 64) rows = 64;
    if (rows > G->p.seqlen_q) rows = G->p.seqlen_q;
    G->check_row0 = G->p.seqlen_q - rows;
    *flops = G->bwd ? 2.5 * fwd_flops(&G->p) : fwd_flops(&G->p); /* the backward: the protocol's 2.5x */
    int rc = G->bwd ? tune_gpu_prepare_bwd(R, G, pi) : tune_gpu_prepare_fwd(R, G, pi);
    G->serve = pb->cls.kind == FG_KIND_SERVE;
    if (rc == 0 && G->serve) { /* the partials of the largest split count (fp32 O and LSE, 256-byte regions) */
        int most = 1;
        for (int c = 0; c < pb->ncands; c++) most = pb->cands[c].spec.splits > most ? pb->cands[c].spec.splits : most;
        const size_t rows = (size_t)most * (size_t)(G->p.batch * G->p.seqlen_q * G->p.heads);
        G->ws_size = (rows * (size_t)G->p.head_dim * 4 + 255) / 256 * 256 + (rows * 4 + 255) / 256 * 256;
        if (R->cu->cuMemAlloc(&G->ws, G->ws_size) != CUDA_SUCCESS) {
            sweep_print(R, SWEEP_ERR, "%s:%d: cannot allocate the %.1f MiB workspace of %d key splits", R->space_path,
                        pb->line, G->ws_size / 1048576.0, most);
            G->ws = 0;
            rc = -1;
        }
    }
    snprintf(l2note, nnote, "%s", G->l2note);
    return rc;
}

/* sweep_bench.check of `tune` for kind "bwd": one launch on the check problem's poisoned gradients and the
 * full check of dQ, dK and dV against the CPU references (ref_check_bwd). */
static fg_status tune_check_bwd(tune_gpu *G, sweep_run *R, const fg_spec *spec, int *pass, char *note, size_t n,
                                fg_error *err) {
    const fg_cuda_api *cu = R->cu;
    fg_status s;
    if ((s = bwd_poison(cu, &G->BC, err)) != FG_OK) return s;
    if ((s = rt_bwd_with_spec(R->ctx, spec, &G->BC.dev, R->stream, err)) != FG_OK) return s;
    FG_CU(err, cu->cuStreamSynchronize(R->stream));
    ref_bwd_report rep;
    if ((s = bwd_check(cu, &G->BC, &G->pc, &rep, NULL, err)) != FG_OK) return s;
    if (!rep.pass) {
        char line[1024];
        ref_bwd_report_format(&rep, line, sizeof line);
        sweep_note(note, n, "check at batch 1 x heads %lld, seqlen_q %lld, seqlen_k %lld: %.900s", G->pc.heads,
                   G->pc.seqlen_q, G->pc.seqlen_k, line);
        return FG_OK;
    }
    const ref_grad_report *g[3] = {&rep.dq, &rep.dk, &rep.dv};
    double worst = 0; /* each bound is at least REF_BWD_ATOL */
    for (int i = 0; i < 3; i++)
        if (g[i]->max_err / g[i]->bound > worst) worst = g[i]->max_err / g[i]->bound;
    *pass = 1;
    sweep_note(note, n, "gradients checked (largest error %.2f of its bound)", worst);
    return FG_OK;
}

/* sweep_bench.check of `tune`: one launch on copy 0's poisoned outputs and the check of its slice (batch 0,
 * check_heads heads, the rows from check_row0) against the CPU reference by `run`'s rule. */
static fg_status tune_check(void *user, sweep_run *R, const fg_spec *spec, int *pass, char *note, size_t n,
                            fg_error *err) {
    tune_gpu *G = user;
    *pass = 0;
    if (G->bwd) return tune_check_bwd(G, R, spec, pass, note, n, err);
    const fg_cuda_api *cu = R->cu;
    fg_status s;
    if ((s = fwd_poison(cu, &G->B, 0, err)) != FG_OK) return s;
    if ((s = G->serve ? tune_serve(G, R, spec, 0, err) : rt_fwd_with_spec(R->ctx, spec, &G->B.dev[0], R->stream, err)) != FG_OK)
        return s;
    FG_CU(err, cu->cuStreamSynchronize(R->stream));
    ref_report rep;
    if ((s = fwd_check(cu, &G->B, &G->p, spec, 0, 1, G->check_heads, G->check_row0, &rep, err)) != FG_OK) return s;
    if (!rep.pass) {
        char line[1024];
        ref_report_format(&rep, line, sizeof line);
        sweep_note(note, n, "check of batch 0, heads 0-%lld, rows %lld-%lld: %.900s", (long long)G->check_heads - 1,
                   (long long)G->check_row0, G->p.seqlen_q - 1, line);
        return FG_OK;
    }
    *pass = 1;
    sweep_note(note, n, "max err %.3g (bound %.3g)", rep.max_err, rep.bound);
    return FG_OK;
}

/* sweep_bench.launch of `tune`: the candidate on copy i mod ncopies (the backward: on the timed problem, its
 * three kernels). */
static fg_status tune_launch(void *user, sweep_run *R, const fg_spec *spec, int i, fg_error *err) {
    const tune_gpu *G = user;
    if (G->bwd) return rt_bwd_with_spec(R->ctx, spec, &G->BB.dev, R->stream, err);
    if (G->serve) return tune_serve(G, R, spec, i, err);
    return rt_fwd_with_spec(R->ctx, spec, &G->B.dev[i % G->B.ncopies], R->stream, err);
}

/* sweep_bench.release of `tune`. */
static void tune_release(void *user, sweep_run *R) {
    tune_gpu *G = user;
    R->cu->cuCtxSynchronize(); /* nothing may still use the buffers freed below */
    fwd_buffers_free(R->cu, &G->B);
    if (G->ws) R->cu->cuMemFree(G->ws);
    G->ws = 0;
    bwd_buffers_free(R->cu, &G->BB);
    bwd_buffers_free(R->cu, &G->BC);
}

/* sweep_bench.open_context of `tune`: warnings logged, no tuning database (the sweep must not trust the
 * file it rewrites), no JIT tiers (a candidate the plan's compile could not store is compiled full by its
 * first call, so a quick build is never timed). */
static fg_context *tune_open_context(void *user, int device) {
    (void)user;
    fg_context *ctx = open_context("tune", device, FG_LOG_WARN, "");
    if (ctx && fg_context_set_option(ctx, FG_OPTION_JIT_TIERS, 0) != FG_OK) {
        say("tune", "%s", fg_last_error(ctx));
        fg_context_destroy(ctx);
        return NULL;
    }
    return ctx;
}

/* ------------------------------------------------------------------ the command */

/* Parses --device's value: "all" (*all = 1), or ordinals separated by commas, each 0..1023 and listed
 * once. Returns 0, or EXIT_USAGE after printing why. */
static int tune_parse_devices(const char *text, int *devs, int *ndev, int *all) {
    *ndev = 0;
    *all = strcmp(text, "all") == 0;
    if (*all) return 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 1023 || (*end != ',' && *end != '\0'))
            return usage_error("tune", "--device '%s': expected an ordinal (0-1023), a list such as 0,2,3, or all", text);
        /* A device listed twice would have two workers disturbing each other's timings. The test suite
         * needs that to run two workers on a one-GPU machine: FLASHGEN_TUNE_SHARE_DEVICE=1 allows it. */
        const char *share = knob_value(FG_KNOB_TUNE_SHARE_DEVICE);
        for (int i = 0; i < *ndev && !(share && strcmp(share, "1") == 0); i++)
            if (devs[i] == (int)v) return usage_error("tune", "--device '%s': device %ld is listed twice", text, v);
        if (*ndev == SHARD_MAX_DEVICES) return usage_error("tune", "--device '%s': at most %d devices", text, SHARD_MAX_DEVICES);
        devs[(*ndev)++] = (int)v;
        if (*end == '\0') return 0;
        p = end + 1;
    }
}

/* `flashgen tune --show [FILE]`: prints a database. With file NULL, this GPU's (device) default one,
 * which must be for this GPU; with a file, any database, no GPU needed. Returns the exit status. */
static int tune_show(const char *file, int device, int csv) {
    fg_error err;
    fg_error_clear(&err);
    char path[PATH_MAX];
    fg_tune_identity id;
    const fg_tune_identity *expect = NULL;
    if (file) {
        if (snprintf(path, sizeof path, "%s", file) >= (int)sizeof path) {
            say("tune", "the database path is longer than %d bytes", (int)sizeof path - 1);
            return EXIT_FAIL;
        }
    } else {
        fg_context *ctx = open_context("tune", device, FG_LOG_WARN, "");
        if (!ctx) return EXIT_FAIL;
        fg_status st = shard_identity(ctx, &id, &err);
        fg_context_destroy(ctx);
        fg_disk_cache cache;
        if (st != FG_OK || cache_open(&cache, NULL, &err) != FG_OK || tunedb_path(cache.dir, &id, path, sizeof path, &err) != FG_OK) {
            say("tune", "%s", err.msg);
            return EXIT_FAIL;
        }
        expect = &id;
    }
    fg_tunedb db;
    memset(&db, 0, sizeof db);
    fg_status st = tunedb_load(path, expect, &db, &err);
    if (st == FG_ERR_NOT_FOUND) {
        say("tune", "no tuning database at %s (`flashgen tune SPACE` makes one)", path);
        return EXIT_FAIL;
    }
    if (st != FG_OK) {
        say("tune", "%s", err.msg);
        tunedb_free(&db);
        return EXIT_FAIL;
    }
    st = csv ? tunedb_format_csv(&db, stdout, &err) : tunedb_format_table(&db, stdout, &err);
    tunedb_free(&db);
    if (st != FG_OK) {
        say("tune", "%s", err.msg);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

enum { OPT_BUDGET = 512, OPT_DB, OPT_SHOW, OPT_CSV, OPT_SHARD, OPT_ALLOW_SPILLS };

/* `flashgen tune SPACE [--device N] [--budget S] [--db FILE] [-j N] [--iters N]` and `tune --show [FILE]`. */
int cmd_tune(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"device", required_argument, NULL, OPT_DEVICE},
                                         {"budget", required_argument, NULL, OPT_BUDGET},
                                         {"db", required_argument, NULL, OPT_DB},
                                         {"jobs", required_argument, NULL, 'j'},
                                         {"iters", required_argument, NULL, OPT_ITERS},
                                         {"show", no_argument, NULL, OPT_SHOW},
                                         {"csv", no_argument, NULL, OPT_CSV},
                                         {"shard", required_argument, NULL, OPT_SHARD},
                                         {"allow-spills", no_argument, NULL, OPT_ALLOW_SPILLS},
                                         {NULL, 0, NULL, 0}};
    const char *db = NULL;
    long long budget = -1, jobs = -1, iters = -1;
    int show = 0, csv = 0, shard = -1, nshards = 0, ndev = 1, all = 0, allow_spills = 0, c;
    int devs[SHARD_MAX_DEVICES] = {0};
    while ((c = getopt_long(argc, argv, ":hj:", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'h': fputs(usage_tune, stdout); return EXIT_OK;
        case OPT_DEVICE: bad = tune_parse_devices(optarg, devs, &ndev, &all); break;
        case OPT_BUDGET: bad = parse_number("tune", "--budget", optarg, 1, 100000000, &budget); break;
        case OPT_DB: db = optarg; break;
        case 'j': bad = parse_number("tune", "-j/--jobs", optarg, 1, 1024, &jobs); break;
        case OPT_ITERS: bad = parse_number("tune", "--iters", optarg, 1, 1000000, &iters); break;
        case OPT_SHOW: show = 1; break;
        case OPT_CSV: csv = 1; break;
        case OPT_ALLOW_SPILLS: allow_spills = 1; break;
        case OPT_SHARD: {
            char *end;
            errno = 0;
            long k = strtol(optarg, &end, 10), n = -1;
            if (end != optarg && *end == '/' && optarg[0] >= '0' && optarg[0] <= '9') {
                char *end2;
                n = strtol(end + 1, &end2, 10);
                if (end2 == end + 1 || *end2 || end[1] < '0' || end[1] > '9') n = -1;
            }
            if (errno || n < 1 || n > SHARD_MAX_DEVICES || k < 0 || k >= n)
                return usage_error("tune", "--shard '%s': expected K/N with 0 <= K < N <= %d (set by --device lists)",
                                   optarg, SHARD_MAX_DEVICES);
            shard = (int)k;
            nshards = (int)n;
            break;
        }
        default: return bad_option("tune", argv, c);
        }
        if (bad) return EXIT_USAGE;
    }
    if (db && !db[0]) return usage_error("tune", "--db needs a file name");
    if (csv && !show) return usage_error("tune", "--csv is a form of --show");
    if (show) {
        if (budget >= 0 || jobs >= 0 || iters >= 0 || nshards || allow_spills)
            return usage_error("tune", "--show prints a database; --budget, -j, --iters, --shard and --allow-spills "
                                       "belong to a sweep");
        if (all || ndev != 1) return usage_error("tune", "--show takes one --device");
        if (optind + 1 < argc) return usage_error("tune", "--show takes at most one FILE, got also '%s'", argv[optind + 1]);
        if (optind < argc && db) return usage_error("tune", "give the database to show as FILE or with --db, not both");
        return tune_show(optind < argc ? argv[optind] : db, devs[0], csv);
    }
    if (optind >= argc) return usage_error("tune", "a SPACE file is required (for example configs/tune_fwd.lua)");
    const char *emu = knob_value(FG_KNOB_EMULATE_ARCH);
    if (emu && *emu) {
        /* A sweep times and records this GPU's own code; the emulated arch's PTX, compiled by the driver, is
         * neither what this GPU runs by default nor what the emulated GPU would. */
        fprintf(stderr, "flashgen tune: FLASHGEN_EMULATE_ARCH=%s is set: a sweep measures this GPU's own kernels, "
                        "so unset it to tune (the variable is for testing another arch's code)\n", emu);
        return EXIT_FAIL;
    }
    if (optind + 1 < argc) return usage_error("tune", "one SPACE file is expected, got also '%s'", argv[optind + 1]);
    if (db && check_output_dir("tune", db)) return EXIT_FAIL;
    if (nshards && (all || ndev != 1)) return usage_error("tune", "--shard is for one worker of a sweep: one --device");
    sweep_opts o = {devs[0], budget > 0 ? (double)budget : 0, jobs > 0 ? (int)jobs : 0, iters > 0 ? (int)iters : 20, db,
                   shard > 0 ? shard : 0, nshards, allow_spills};
    tune_gpu G;
    memset(&G, 0, sizeof G);
    const sweep_bench bench = {&G, tune_open_context, tune_check_shapes, tune_gpu_prepare, tune_check, tune_launch,
                               tune_release};
    if (all || ndev > 1) return shard_sweep(argv[optind], &o, devs, ndev, all, &bench);
    return sweep_space(argv[optind], &o, &bench);
}
