/* cli.h: what the files of the `flashgen` program share: cli.c (gen, compile, list, main), cmd_bundle.c
 * (bundle), cmd_mod.c (mod, and gen's and compile's --mod), cmd_info.c (info, cache), cli_gpu.c (run,
 * explain), cli_variants.c (the model variants of run and explain: their options, values and serving calls),
 * gpu_buffers.c (the problem's GPU buffers and reference checks, which tune uses too) and cmd_tune.c (tune, over
 * autotune/sweep.c and autotune/shard.c). The messages and option helpers are tools/harness.h's, the timing loop
 * autotune/timing.h's. Not a library header. */
#ifndef FG_CLI_H
#define FG_CLI_H

#include <stddef.h>
#include <stdint.h>
#include "autotune/timing.h"
#include "runtime/cuda_api.h"
#include "tools/harness.h"
#include "core/error.h"
#include "flashgen.h"
#include "reference/reference.h"
#include "generator/spec.h"

/* ---- cli_gpu.c: the problem, the GPU buffers and the reference checks (run, tune) */

/* One attention problem, from the command line. */
typedef struct problem {
    fg_dtype dtype;          /* Q/K/V element type (and O's, for fp16/bf16) */
    long long batch;         /* b */
    long long seqlen_q;      /* sq */
    long long seqlen_k;      /* sk; -1 until parsed: defaults to sq */
    long long heads;         /* hq */
    long long heads_kv;      /* hkv; -1 until parsed: defaults to hq */
    long long head_dim;      /* d */
    int causal;              /* bottom-right aligned causal mask */
    long long iters;         /* timed launches (run) */
    long long seed;          /* input seed (run) */
    long long device;        /* CUDA ordinal */
    fg_dtype out_dtype;      /* FP8 only: O's type (bf16 unless --out says fp16); FP8's V is key-major */
    int bwd;                 /* run --bwd: the backward pass (fp16/bf16) */
    const char *arch;        /* explain --arch: the target explained without a device (NULL: the device's) */
    /* The model variants (cli_variants.c), each off when zero; any of them sends the call to the serving entry
     * points (fg_attention_fwd_varlen, fg_attention_bwd_varlen): */
    long long head_dim_v;    /* V's and O's head dim (--head-dim-v; 0: head_dim) */
    int window;              /* --window: a sliding window about each query's bottom-right diagonal */
    long long window_left, window_right; /* its sides in keys, -1 unbounded */
    float softcap;           /* --softcap: > 0 caps the logits at softcap * tanh(logit / softcap) */
    int sinks;               /* --sinks: a sink logit per query head (variant_sinks) */
    int alibi;               /* --alibi: the standard ALiBi slopes of the head count (variant_alibi_slopes) */
    int causal_top_left;     /* --causal-top-left: the causal mask aligned to the top-left corner */
} problem;

/* getopt_long codes of the problem options of run and explain; `tune` reuses OPT_DEVICE and OPT_ITERS. */
enum { OPT_DTYPE = 256, OPT_BATCH, OPT_SQ, OPT_SK, OPT_HEADS, OPT_HKV, OPT_D, OPT_CAUSAL, OPT_ITERS, OPT_SEED, OPT_DEVICE,
       OPT_OUT, OPT_BWD, OPT_ARCH, OPT_HEAD_DIM_V, OPT_WINDOW, OPT_SOFTCAP, OPT_SINKS, OPT_ALIBI, OPT_TOP_LEFT };

#define FWD_MAX_COPIES 8 /* most device copies of a problem's tensors a timing rotates over */

/* The host inputs and device tensors of one forward problem. Zeroed, it holds nothing; fwd_buffers_free
 * frees whatever a (possibly failed) fwd_buffers_init allocated. */
typedef struct fwd_buffers {
    size_t esz;                 /* bytes per Q/K/V element */
    size_t oesz;                /* bytes per O element (esz, or 2 for FP8) */
    size_t nq, nkv, nlse;       /* elements of Q, of K, of the LSE */
    size_t no;                  /* elements of O (nq, unless V has a head dim of its own) */
    size_t nv;                  /* elements of V's allocation (FP8: key-major rows padded to 16) */
    void *hq, *hk, *hv;         /* host inputs (V's padding NaN), filled with N(0,1) */
    float *hsinks, *hslopes;    /* the model variants' per-head values, [heads], or NULL when p has none */
    CUdeviceptr sinks, slopes;  /* their device copies (0: none), which every copy's call shares */
    fg_fwd_args host;           /* views of the host inputs (o and lse have no data) */
    int ncopies;                /* device copies that are complete */
    CUdeviceptr q[FWD_MAX_COPIES], k[FWD_MAX_COPIES], v[FWD_MAX_COPIES]; /* inputs per copy (0: none) */
    CUdeviceptr o[FWD_MAX_COPIES], lse[FWD_MAX_COPIES];                 /* outputs per copy (0: none) */
    fg_fwd_args dev[FWD_MAX_COPIES]; /* the call's arguments on each complete copy */
} fwd_buffers;

/* One backward problem on the GPU (`tune` of kind = "bwd" spaces): Q, K, V from a seed and the forward's O
 * and LSE for them (one copy of fwd_buffers, the forward run by fg_attention_fwd), dO from the seed, the
 * gradients and the workspace. Zeroed, it holds nothing; bwd_buffers_free frees what a (possibly failed)
 * bwd_buffers_init allocated. */
typedef struct bwd_buffers {
    fwd_buffers F;                   /* q, k, v, o, lse: copy 0 only */
    void *hdo;                       /* host dO, N(0,1) */
    CUdeviceptr dout, dq, dk, dv, ws; /* device dO, gradients, workspace (0: none) */
    size_t ws_bytes;                 /* the workspace's size */
    fg_bwd_args dev;                 /* the call's arguments on the device tensors */
    /* With model variants the calls are the serving ones on the same memory, packed: */
    CUdeviceptr cu_q, cu_k;          /* the uniform batch's offsets, batch + 1 int32 each (0: a plain problem) */
    CUdeviceptr dsink;               /* with sinks: the sinks' gradient, fp32 [heads] (0: none) */
    fg_varlen_bwd_args vdev;         /* fg_attention_bwd_varlen's arguments (the LSE [heads, batch x seqlen_q]) */
} bwd_buffers;

/* What bwd_check found of dsink. */
typedef struct dsink_report {
    int checked;             /* 1 when the problem has sinks and dsink was judged */
    int pass;                /* 1 when every head is within its bound */
    double max_err, bound;   /* |dsink - ref| and its bound at the head reported */
    int64_t worst;           /* that head: the first out of bounds, else the largest error (-1: none) */
    double worst_out, worst_ref; /* dsink and the reference there */
} dsink_report;

/* Fills a with contiguous Q/K/V/O/LSE tensors of problem p at the given (device) addresses. */
void problem_args(const problem *p, void *q, void *k, void *v, void *o, void *lse, fg_fwd_args *a);
/* V's and O's head dim of p (head_dim unless --head-dim-v gave another). */
long long problem_head_dim_v(const problem *p);
/* Creates a context on device logging at level (tuning_db as for fg_context_options); NULL after printing why. */
fg_context *open_context(const char *cmd, int device, fg_log_level level, const char *tuning_db);
/* Device bytes of one copy of p's tensors (Q, K, V, O and the LSE). */
double fwd_copy_bytes(const problem *p);
/* Frees every buffer of B (device memory in the current context) and zeroes it. */
void fwd_buffers_free(const fg_cuda_api *cu, fwd_buffers *B);
/* Fills the outputs of copy `copy` with NaN and waits for it (needs the context current). */
fg_status fwd_poison(const fg_cuda_api *cu, const fwd_buffers *B, int copy, fg_error *err);
/* Makes B hold problem p: N(0,1) host inputs from seed and up to `copies` uploaded, poisoned device copies. */
fg_status fwd_buffers_init(const fg_cuda_api *cu, const problem *p, uint64_t seed, int copies, fwd_buffers *B,
                           fg_error *err);
/* Checks a slice (batches, heads, rows from row0) of copy `copy`'s output, written by variant `ran`, against the
 * CPU reference into *rep. */
fg_status fwd_check(const fg_cuda_api *cu, const fwd_buffers *B, const problem *p, const fg_spec *ran, int copy,
                    int64_t nb, int64_t nh, int64_t row0, ref_report *rep, fg_error *err);
/* The FLOPs of one forward pass of p: 2*b*h*sq*sk*(d + dv), half when causal; with a window or a top-left causal
 * mask, the pairs it lets through counted in place of sq*sk. */
double fwd_flops(const problem *p);
/* Fills a with the contiguous tensors of backward problem p (problem_args' Q/K/V/O/LSE, dO like O, dQ like Q,
 * dK like K, dV like V; no workspace) at the given (device) addresses. */
void bwd_problem_args(const problem *p, void *q, void *k, void *v, void *o, void *lse, void *dout, void *dq, void *dk,
                      void *dv, fg_bwd_args *a);
/* Device bytes of p's backward tensors (Q, K, V, O, dO, LSE, the gradients; not the workspace). */
double bwd_copy_bytes(const problem *p);
/* Makes B hold 16-bit problem p on ctx's device (current): inputs from seed, O and LSE by fg_attention_fwd, the
 * gradients poisoned, the workspace fg_attention_bwd_workspace_size asks; with model variants, the packed form
 * (cu_q, cu_k, vdev; dsink with sinks), O and LSE by fg_attention_fwd_varlen, the workspace
 * fg_attention_bwd_varlen_workspace_size asks (failing with the library's sentence when it refuses the call). */
fg_status bwd_buffers_init(fg_context *ctx, const problem *p, uint64_t seed, bwd_buffers *B, fg_error *err);
/* Frees every buffer of B and zeroes it. */
void bwd_buffers_free(const fg_cuda_api *cu, bwd_buffers *B);
/* Fills dQ, dK and dV with NaN, the workspace with all-ones bytes, and waits for it. */
fg_status bwd_poison(const fg_cuda_api *cu, const bwd_buffers *B, fg_error *err);
/* Judges B's gradients (all of them: keep the problem small) against the CPU references by the rule for
 * gradients (ref_check_bwd: max|out - ref32| <= 3 max|ref_lowp - ref32| + 1e-5) into *rep; the kernel
 * must have finished. With ds (may be NULL) also B's dsink (problems with sinks; ds->checked 0 otherwise) against
 * ref_sink_grad's, summed over the sequences: each head within 1e-3 of the sum of the sequences' magnitudes, plus
 * 1e-5. */
fg_status bwd_check(const fg_cuda_api *cu, const bwd_buffers *B, const problem *p, ref_bwd_report *rep, dsink_report *ds,
                    fg_error *err);
/* A one-line account of r into buf (n bytes, NUL-terminated); returns buf. */
char *dsink_report_format(const dsink_report *r, char *buf, size_t n);

/* ---- cli_variants.c: the model variants of run and explain */

/* Parses --window L,R (each side -1, unbounded, or a key count) and --softcap C (a number above 0) into p: 0, or
 * EXIT_USAGE (printed). */
int parse_window(const char *cmd, const char *text, problem *p);
int parse_softcap(const char *cmd, const char *text, problem *p);
/* The first model-variant option p was given ("--window", ...), or NULL when it has none: a problem with one runs
 * through the serving entry points. */
const char *problem_variant_option(const problem *p);
int problem_has_variants(const problem *p);
/* Appends ", window (L, R)", ", softcap C", ... for p's model variants to buf (n bytes); returns buf. */
char *problem_variants_text(const problem *p, char *buf, size_t n);
/* Fills B's per-head arrays for p's sinks and ALiBi (host and device; nothing without them) from seed. */
fg_status variant_buffers_init(const fg_cuda_api *cu, const problem *p, uint64_t seed, fwd_buffers *B, fg_error *err);
/* The serving call (fg_varlen_args) of problem p on f's tensors (problem_args') with p's model variants and the
 * per-head arrays sinks and slopes (NULL: none): dense q and keys, or with `packed` the same memory as packed
 * sequences ([batch x seqlen, heads, d], the LSE [heads, batch x seqlen_q]) with offsets cu_q and cu_k. */
void problem_varlen_args(const problem *p, const fg_fwd_args *f, int packed, const float *sinks, const float *slopes,
                         const int32_t *cu_q, const int32_t *cu_k, fg_varlen_args *a);
/* The packed backward call (fg_varlen_bwd_args) of p on b's tensors (bwd_problem_args'), as problem_varlen_args. */
void problem_varlen_bwd_args(const problem *p, const fg_bwd_args *b, const float *sinks, const float *slopes,
                             float *dsink, const int32_t *cu_q, const int32_t *cu_k, fg_varlen_bwd_args *a);
/* The library's rules (serving_check, no device needed) on the forward serving call of p in the form `run` makes
 * (dense; packed with --bwd): FG_OK, or the broken rule's sentence in err. */
fg_status variant_check(const problem *p, fg_error *err);
/* The library's rules (fg_attention_bwd_varlen_workspace_size, on ctx) on the packed backward call of p: FG_OK, or
 * the broken rule's sentence in err. */
fg_status variant_bwd_check(fg_context *ctx, const problem *p, fg_error *err);
/* The serving call of `run` on B's copy 0 (dense; B from fwd_buffers_init) into *a, with a workspace of the size the
 * library asks (*ws, device memory the caller frees; 0 when none). */
fg_status variant_call_init(fg_context *ctx, const fg_cuda_api *cu, const problem *p, const fwd_buffers *B,
                            fg_varlen_args *a, CUdeviceptr *ws, fg_error *err);
/* What can be said of the packed backward call a (problem p) before it runs, into buf: the library's rules
 * (fg_attention_bwd_varlen_workspace_size; its status, the sentence on ctx), the workspace, and that the library
 * has no explain of that call. */
fg_status explain_bwd_varlen(fg_context *ctx, const problem *p, const fg_varlen_bwd_args *a, char *buf, size_t n);
/* `explain` of a problem with model variants on ctx's device: fg_explain_varlen's text, or for --bwd
 * explain_bwd_varlen's. Returns the exit status. */
int explain_variants(fg_context *ctx, const problem *p);

/* ---- the commands main dispatches to: each takes argv[0] = the command name and returns the exit status */

/* `flashgen run` (cli_gpu.c). */
int cmd_run(int argc, char **argv);
/* `flashgen explain` (cli_gpu.c). */
int cmd_explain(int argc, char **argv);
/* `flashgen info` (cmd_info.c). */
int cmd_info(int argc, char **argv);
/* config_skip_fn for --arch (cmd_bundle.c): prints "flashgen USER: skipping NAME: WHY" on stderr. */
void report_skipped_variant(void *user, const char *name, const char *why);
/* `flashgen bundle` (cmd_bundle.c). */
int cmd_bundle(int argc, char **argv);
/* `flashgen mod` (cmd_mod.c). */
int cmd_mod(int argc, char **argv);
/* --mod FILE of gen and compile (cmd_mod.c): traces and registers the mod in FILE and sets spec's mod to its id,
 * refusing a spec that names another. 0, or EXIT_FAIL after printing the sentence (prefixed with cmd). */
int mod_option_apply(const char *cmd, const char *path, fg_spec *spec);
/* `flashgen cache` (cmd_info.c). */
int cmd_cache(int argc, char **argv);
/* `flashgen tune` (cmd_tune.c). */
int cmd_tune(int argc, char **argv);

#endif
