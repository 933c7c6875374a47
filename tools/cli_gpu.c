/* cli_gpu.c: `flashgen run` and `flashgen explain`: their options, the problem they describe, and the
 * timed, checked launches of `run` (the buffers and checks are gpu_buffers.c's; the model variants' values and
 * serving calls cli_variants.c's). Part of the `flashgen` program; cli.h lists its files. */
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/cli.h"
#include "runtime/cuda_api.h"
#include "flashgen.h"
#include "reference/reference.h" /* the CPU reference `run` and `tune` check against; build.ninja links reference.o */
#include "runtime/runtime.h"   /* the context's driver entry points, for the backward's buffers */
#include "generator/spec.h"
#include "generator/tile_policy.h"
#include "generator/validate.h"  /* arch_smem_limit, spec_validate */
#include "runtime/call_args.h" /* explain --arch checks the problem as the library does */
#include "runtime/dispatch.h"  /* explain --arch: the library's variant choice without a device */

/* ------------------------------------------------------------------ usage texts */

static const char usage_run[] =
    "usage: flashgen run [--dtype fp16|bf16|e4m3|e5m2] [--out fp16|bf16] [--batch B] [--seqlen-q N]\n"
    "                    [--seqlen-k N] [--heads H] [--heads-kv H] [--head-dim D] [--causal] [--iters N]\n"
    "                    [--seed S] [--device N] [--bwd] [--head-dim-v N] [--window L,R] [--causal-top-left]\n"
    "                    [--softcap C] [--sinks] [--alibi]\n"
    "\n"
    "Runs one forward pass on a GPU through the public API and checks it: random N(0,1) inputs (FP8: V\n"
    "N(1,1), see --dtype), the output poisoned with NaN before the launch, every element compared with\n"
    "the CPU reference (pass when max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5, nothing NaN/Inf,\n"
    "the LSE within tolerance).\n"
    "Then it times --iters launches (after 3 warm-up launches) with CUDA events and prints the median time\n"
    "and TFLOP/s (2*b*h*sq*sk*(d + dv) FLOPs, half that when causal; with a window or a top-left mask the\n"
    "pairs it lets through, counted). The first launch may JIT-compile the kernel (logged): quick, its\n"
    "optimized build compiling in the background, which the timing waits for (the check judges the quick\n"
    "build the first launch ran). Exits 1 if the check fails or there is no GPU.\n"
    "With --bwd the same for the backward pass (fp16/bf16): O and the LSE from the forward, dO N(0,1),\n"
    "dQ, dK, dV and the workspace poisoned, every gradient element compared with the CPU references\n"
    "(max|out - ref32| <= 3 * max|ref_lowp - ref32| + 1e-5), then timed at 2.5x the forward's FLOPs.\n"
    "The model variants (--head-dim-v, --window, --causal-top-left, --softcap, --sinks, --alibi; fp16/bf16)\n"
    "run through the serving entry points: the forward is fg_attention_fwd_varlen on the dense tensors\n"
    "(with the workspace it asks for), the backward fg_attention_bwd_varlen on the same memory as packed\n"
    "sequences of the uniform batch, after fg_attention_fwd_varlen in that form. They are checked the same\n"
    "way, against the CPU reference of the same variants; with --sinks --bwd dsink too (each head within\n"
    "1e-3 of the sum of the sequences' magnitudes, plus 1e-5). A combination the library refuses exits 1\n"
    "with its sentence.\n"
    "\n"
    "      --dtype T       fp16, bf16, or FP8 e4m3 / e5m2 (sm_89+; default bf16). FP8 inputs are N(0,1)\n"
    "                      rounded to the format (V N(1,1), so that accumulation drift over long key\n"
    "                      ranges shows), no descales, V key-major with its row padding NaN\n"
    "      --out T         O's type for FP8: bf16 (default) or fp16\n"
    "      --batch B       batch size (default 2)\n"
    "      --seqlen-q N    query length (default 1024)\n"
    "      --seqlen-k N    key/value length (default: the query length)\n"
    "      --heads H       query heads (default 8)\n"
    "      --heads-kv H    key/value heads, dividing H (default: H; fewer is GQA/MQA)\n"
    "      --head-dim D    head dimension (default 128)\n"
    "      --causal        bottom-right aligned causal mask\n"
    "      --iters N       timed launches (default 20)\n"
    "      --seed S        random seed of the inputs (default 0)\n"
    "      --device N      CUDA device ordinal (default 0)\n"
    "      --bwd           the backward pass (fg_attention_bwd) instead of the forward\n"
    "      --head-dim-v N  V's and O's head dimension (default: --head-dim's)\n"
    "      --window L,R    a sliding window: query i, of diagonal d = i + seqlen_k - seqlen_q, sees keys d-L\n"
    "                      to d+R (within the causal limit with --causal); -1 leaves a side unbounded\n"
    "      --causal-top-left  with --causal: the mask aligned to the top-left corner (query i sees keys j <= i)\n"
    "      --softcap C     logits capped at C * tanh(logit / C), C > 0 (Gemma 2)\n"
    "      --sinks         an attention sink per query head (gpt-oss): logit ln(seqlen_k) + U(-2, 2) from --seed\n"
    "      --alibi         ALiBi with the standard slopes of --heads (2^(-8/H), 2^(-16/H), ..., 2^(-8) for H a\n"
    "                      power of two)\n";

static const char usage_explain[] =
    "usage: flashgen explain [--arch sm_XY[a]] [--bwd] [--dtype fp16|bf16|e4m3|e5m2] [--out fp16|bf16]\n"
    "                        [--batch B] [--seqlen-q N] [--seqlen-k N] [--heads H] [--heads-kv H]\n"
    "                        [--head-dim D] [--causal] [--device N] [--iters N] [--seed S]\n"
    "\n"
    "Says which kernel variant `run` (or fg_attention_fwd; with --bwd, fg_attention_bwd) would launch for the\n"
    "problem, where its code would come from (memory, disk cache, bundle, or a JIT compile) and why those\n"
    "tiles, on GPU --device. Compiles and launches nothing. Takes every option `run` takes, with its\n"
    "defaults (--iters and --seed change nothing here).\n"
    "With a model variant option (--window, --softcap, ...) it prints fg_explain_varlen's account of the\n"
    "serving call `run` makes; with --bwd, the rules and the workspace of fg_attention_bwd_varlen's call,\n"
    "which the library does not explain further. These need the device: --arch takes none of them.\n"
    "\n"
    "      --arch T        explain for target T (sm_80, sm_86, sm_89, sm_90, sm_90a, sm_120, ...) instead of\n"
    "                      the device, with no GPU needed: the variant dispatch would choose there from the\n"
    "                      tile policy (no tuning database), with the arch's defaults assumed (sm_90a: the\n"
    "                      wgmma family where the call fits it; sm_90: the mma.sync family only, as with\n"
    "                      FLASHGEN_WGMMA=0; no FLASHGEN_ knobs; contiguous tensors; the arch's shared\n"
    "                      memory). A variant the arch cannot run exits 1 with the rule it breaks\n"
    "      --bwd           the backward pass (fp16/bf16) instead of the forward\n"
    "      other options   as for `run` (flashgen run --help)\n";

/* ------------------------------------------------------------------ run and explain */

/* The problem struct and the OPT_ option codes are in cli.h (tune uses them too). */

/* The options `run` and `explain` share; `explain` adds --arch. */
#define PROBLEM_OPTIONS                                                                                        \
    {"help", no_argument, NULL, 'h'}, {"dtype", required_argument, NULL, OPT_DTYPE},                          \
        {"batch", required_argument, NULL, OPT_BATCH}, {"seqlen-q", required_argument, NULL, OPT_SQ},         \
        {"seqlen-k", required_argument, NULL, OPT_SK}, {"heads", required_argument, NULL, OPT_HEADS},         \
        {"heads-kv", required_argument, NULL, OPT_HKV}, {"head-dim", required_argument, NULL, OPT_D},         \
        {"causal", no_argument, NULL, OPT_CAUSAL}, {"device", required_argument, NULL, OPT_DEVICE},             \
        {"out", required_argument, NULL, OPT_OUT}, {"iters", required_argument, NULL, OPT_ITERS},              \
        {"seed", required_argument, NULL, OPT_SEED}, {"bwd", no_argument, NULL, OPT_BWD},                      \
        {"head-dim-v", required_argument, NULL, OPT_HEAD_DIM_V}, {"window", required_argument, NULL, OPT_WINDOW}, \
        {"causal-top-left", no_argument, NULL, OPT_TOP_LEFT}, {"softcap", required_argument, NULL, OPT_SOFTCAP},  \
        {"sinks", no_argument, NULL, OPT_SINKS}, {"alibi", no_argument, NULL, OPT_ALIBI}

/* Parses the problem options of `run` (timing != 0) or `explain` into *p. Returns -1 to go on, or the
 * exit status to return now (0 after --help, EXIT_USAGE after a printed usage error). */
static int parse_problem(const char *cmd, int argc, char **argv, int timing, problem *p) {
    static const struct option run_opts[] = {PROBLEM_OPTIONS, {NULL, 0, NULL, 0}};
    static const struct option explain_opts[] = {PROBLEM_OPTIONS, {"arch", required_argument, NULL, OPT_ARCH},
                                                 {NULL, 0, NULL, 0}};
    *p = (problem){.dtype = FG_DTYPE_BF16, .batch = 2, .seqlen_q = 1024, .seqlen_k = -1, .heads = 8, .heads_kv = -1,
                   .head_dim = 128, .iters = 20, .out_dtype = FG_DTYPE_BF16}; /* the rest 0: no model variants */
    int c, out_given = 0;
    while ((c = getopt_long(argc, argv, ":h", timing ? run_opts : explain_opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'h': fputs(timing ? usage_run : usage_explain, stdout); return EXIT_OK;
        case OPT_DTYPE:
            if (strcmp(optarg, "fp16") == 0) p->dtype = FG_DTYPE_F16;
            else if (strcmp(optarg, "bf16") == 0) p->dtype = FG_DTYPE_BF16;
            else if (strcmp(optarg, "e4m3") == 0) p->dtype = FG_DTYPE_E4M3;
            else if (strcmp(optarg, "e5m2") == 0) p->dtype = FG_DTYPE_E5M2;
            else return usage_error(cmd, "--dtype must be fp16, bf16, e4m3 or e5m2, got '%s'", optarg);
            break;
        case OPT_OUT:
            out_given = 1;
            if (strcmp(optarg, "fp16") == 0) p->out_dtype = FG_DTYPE_F16;
            else if (strcmp(optarg, "bf16") == 0) p->out_dtype = FG_DTYPE_BF16;
            else return usage_error(cmd, "--out must be fp16 or bf16 (the output type of an FP8 problem), got '%s'",
                                    optarg);
            break;
        case OPT_BATCH: bad = parse_number(cmd, "--batch", optarg, 1, 65535, &p->batch); break;
        case OPT_SQ: bad = parse_number(cmd, "--seqlen-q", optarg, 1, 1 << 24, &p->seqlen_q); break;
        case OPT_SK: bad = parse_number(cmd, "--seqlen-k", optarg, 1, 1 << 24, &p->seqlen_k); break;
        case OPT_HEADS: bad = parse_number(cmd, "--heads", optarg, 1, 65535, &p->heads); break;
        case OPT_HKV: bad = parse_number(cmd, "--heads-kv", optarg, 1, 65535, &p->heads_kv); break;
        case OPT_D: bad = parse_number(cmd, "--head-dim", optarg, 1, 1024, &p->head_dim); break;
        case OPT_CAUSAL: p->causal = 1; break;
        case OPT_ITERS: bad = parse_number(cmd, "--iters", optarg, 1, 1000000, &p->iters); break;
        case OPT_SEED: bad = parse_number(cmd, "--seed", optarg, 0, LLONG_MAX, &p->seed); break;
        case OPT_DEVICE: bad = parse_number(cmd, "--device", optarg, 0, 1023, &p->device); break;
        case OPT_BWD: p->bwd = 1; break;
        case OPT_HEAD_DIM_V: bad = parse_number(cmd, "--head-dim-v", optarg, 1, 1024, &p->head_dim_v); break;
        case OPT_WINDOW: bad = parse_window(cmd, optarg, p); break;
        case OPT_TOP_LEFT: p->causal_top_left = 1; break;
        case OPT_SOFTCAP: bad = parse_softcap(cmd, optarg, p); break;
        case OPT_SINKS: p->sinks = 1; break;
        case OPT_ALIBI: p->alibi = 1; break;
        case OPT_ARCH: {
            fg_error aerr;
            int arch, accel;
            if (spec_arch_parse(optarg, &arch, &accel, &aerr) != FG_OK)
                return usage_error(cmd, "--arch: %s", aerr.msg);
            if (accel && arch != 90)
                return usage_error(cmd, "--arch %s: the only arch-specific target flashgen builds is sm_90a; give "
                                   "sm_%d", optarg, arch);
            p->arch = optarg;
            break;
        }
        default: return bad_option(cmd, argv, c);
        }
        if (bad) return EXIT_USAGE;
    }
    if (optind < argc) return usage_error(cmd, "unexpected argument '%s' (the problem is given by options)", argv[optind]);
    if (out_given && !dtype_is_fp8(p->dtype))
        return usage_error(cmd, "--out sets the output type of an FP8 problem; a %s problem's output is %s",
                           dtype_name(p->dtype), dtype_name(p->dtype));
    if (p->bwd && p->dtype != FG_DTYPE_F16 && p->dtype != FG_DTYPE_BF16)
        return usage_error(cmd, "--bwd takes --dtype fp16 or bf16 (the backward pass is 16-bit), got %s",
                           dtype_name(p->dtype));
    const char *variant = problem_variant_option(p);
    if (variant && p->dtype != FG_DTYPE_F16 && p->dtype != FG_DTYPE_BF16)
        return usage_error(cmd, "%s takes --dtype fp16 or bf16 (the model variants run through the serving calls, "
                           "which are 16-bit), got %s", variant, dtype_name(p->dtype));
    if (variant && p->arch)
        return usage_error(cmd, "--arch explains fg_attention_fwd and fg_attention_bwd without a device; %s runs "
                           "through the serving calls, whose choice reads the device (its SMs set the key splits, "
                           "Hopper takes the sm_90a prefill): explain it on the GPU, without --arch", variant);
    if (p->seqlen_k < 0) p->seqlen_k = p->seqlen_q;
    if (p->heads_kv < 0) p->heads_kv = p->heads;
    if (p->heads % p->heads_kv != 0)
        return usage_error(cmd, "--heads-kv %lld must divide --heads %lld (each K/V head serves a group of query heads)",
                           p->heads_kv, p->heads);
    /* Each option is bounded, but their product can still pass 2^63; the host must also hold every
     * tensor and the CPU reference must finish, so refuse sizes no machine can check. */
    double elems = (double)p->batch * (double)(p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k) *
                   (double)p->heads * (double)(p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v);
    if (elems > 0x1p40)
        return usage_error(cmd, "the problem has %.3g elements per tensor (batch x seqlen x heads x head_dim); "
                           "the limit is 2^40", elems);
    return -1;
}

/* Creates a context on `device` logging at `level` (run and explain use FG_LOG_INFO, so a JIT compile
 * is visible, never a silent pause). tuning_db is passed to fg_context_options (NULL: this GPU's
 * default file; "": none). Returns the context, or NULL after printing "no CUDA device: ..." or the
 * failure. */
fg_context *open_context(const char *cmd, int device, fg_log_level level, const char *tuning_db) {
    fg_error err;
    fg_error_clear(&err);
    if (!cuda_api_get(&err)) {
        say(cmd, "no CUDA device: %s", err.msg);
        return NULL;
    }
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.device = device;
    opt.log_level = level;
    opt.tuning_db = tuning_db;
    fg_context *ctx = NULL;
    fg_status st = fg_context_create(&ctx, &opt);
    if (st != FG_OK) {
        if (st == FG_ERR_NO_DEVICE) say(cmd, "no CUDA device: %s", fg_last_error(NULL));
        else say(cmd, "%s", fg_last_error(NULL));
        return NULL;
    }
    return ctx;
}

/* `explain --arch`: the variant dispatch would choose for p on target `arch` with no device (select.c's
 * choice on the arch's defaults: select_target_for_arch), its shared memory and threads, and what was
 * assumed. Returns the exit status (1 with the broken rule's sentence when the arch cannot run the call). */
static int explain_for_arch(const problem *p) {
    fg_error err;
    fg_error_clear(&err);
    int arch, accel;
    if (spec_arch_parse(p->arch, &arch, &accel, &err) != FG_OK) { /* parse_problem checked it */
        say("explain", "%s", err.msg);
        return EXIT_FAIL;
    }
    if (arch_smem_limit(arch) == 0) { /* before the tile policy, which has no rule for it either */
        fg_spec known = {0};
        known.kind = FG_KIND_FWD, known.arch = arch, known.dtype = known.out_dtype = FG_DTYPE_BF16;
        spec_validate(&known, &err); /* the arch_known rule's sentence (the first rule) */
        say("explain", "%s", err.msg);
        return EXIT_FAIL;
    }
    fg_tile_policy policy;
    if (tile_policy_init_default(&policy, &err) != FG_OK) {
        say("explain", "%s", err.msg);
        return EXIT_FAIL;
    }
    select_target t;
    select_target_for_arch(arch, accel, &policy, &t);
    fg_spec s;
    char why[600] = "";
    fg_status st;
    if (p->bwd) {
        fg_bwd_args b;
        bwd_problem_args(p, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &b);
        st = rt_check_bwd_args(&b, 0, 0, &err);
        if (st == FG_OK) st = select_bwd_spec_for(&t, &b, &s, &err);
        if (st == FG_OK)
            snprintf(why, sizeof why, "%s", spec_is_wgmma_bwd(&s) ? "the sm_90a backward's tile" : "the tile policy");
    } else {
        fg_fwd_args a;
        problem_args(p, NULL, NULL, NULL, NULL, NULL, &a);
        st = rt_check_fwd_args(&a, 0, &err);
        if (st == FG_OK) st = select_fwd_spec_for(&t, &a, &s, why, sizeof why, &err);
    }
    tile_policy_free(&policy);
    if (st != FG_OK) {
        say("explain", "%s", err.msg);
        return EXIT_FAIL;
    }
    char name[FG_SPEC_NAME_MAX];
    spec_format(&s, name, sizeof name);
    const char *path = p->bwd ? (spec_is_wgmma_bwd(&s) ? "sm_90a path (wgmma, two warpgroups of 64 keys)"
                                 : s.tma             ? "mma.sync path (sm_80+), loads by TMA"
                                                     : "mma.sync path (sm_80+)")
                       : spec_is_wgmma(&s)       ? "FlashAttention-3 style sm_90a path (TMA, wgmma, consumer warpgroups: block_m / 64)"
                       : dtype_is_fp8(s.dtype)   ? "FP8 mma.sync m16n8k32 path (sm_89+)"
                                                 : "FlashAttention-2 mma.sync path (sm_80+)";
    printf("variant %s\n  kernel: %s, %s, %d threads, %zu bytes shared memory\n  tiles: %s\n", name,
           p->bwd ? "backward main kernel" : "forward", path, spec_threads(&s), spec_smem_bytes(&s), why);
    printf("  assumed: target %s, no device read, with fg_context_create's defaults: no FLASHGEN_ knobs set "
           "(FLASHGEN_WGMMA, _WGMMA_FP8, _WGMMA_BWD, _BWD_TMA), a driver that encodes tensor maps, %zu bytes of "
           "shared memory a block; ",
           p->arch, t.smem_optin);
    if (arch == 90 && !accel)
        printf("sm_90 keeps the sm_90a (wgmma) families off, as FLASHGEN_WGMMA=0 does (sm_90a takes them); ");
    printf("contiguous, 16-byte aligned tensors%s; no tuning database (the tile policy chooses)\n",
           p->bwd ? "" : dtype_is_fp8(p->dtype) ? " (FP8's V key-major)" : "");
    printf("  code: not looked up (no device): `flashgen explain` on the GPU says memory, disk cache, bundle or JIT\n");
    return EXIT_OK;
}

/* The library's rules on the serving call of a problem with model variants, before any device work: -1 to go on,
 * or EXIT_FAIL after printing the broken rule's sentence. */
static int check_variants(const char *cmd, const problem *p) {
    fg_error err;
    fg_error_clear(&err);
    if (!problem_has_variants(p) || variant_check(p, &err) == FG_OK) return -1;
    say(cmd, "%s", err.msg);
    return EXIT_FAIL;
}

/* `flashgen explain [--arch T] [--bwd] [problem options]`. */
int cmd_explain(int argc, char **argv) {
    problem p;
    int rc = parse_problem("explain", argc, argv, 0, &p);
    if (rc < 0) rc = check_variants("explain", &p);
    if (rc >= 0) return rc;
    if (p.arch) return explain_for_arch(&p);
    fg_error err;
    fg_error_clear(&err);
    /* --arch explains the dense calls for a GPU one does not have; the model variants' calls need the device */
    const char *hint = problem_has_variants(&p) ? "the model variants are explained on the device they run on"
                                                : "pass --arch sm_90a (or sm_80, sm_89, ...) to explain for a GPU you do "
                                                  "not have";
    if (!cuda_api_get(&err)) {
        say("explain", "no CUDA device: %s; %s", err.msg, hint);
        return EXIT_FAIL;
    }
    fg_context *ctx = open_context("explain", (int)p.device, FG_LOG_INFO, NULL);
    if (!ctx) {
        say("explain", "%s", hint);
        return EXIT_FAIL;
    }
    if (problem_has_variants(&p)) {
        const int status = explain_variants(ctx, &p);
        fg_context_destroy(ctx);
        return status;
    }
    char buf[4096];
    fg_status st;
    if (p.bwd) {
        fg_bwd_args b;
        bwd_problem_args(&p, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &b);
        st = fg_explain_bwd(ctx, &b, buf, sizeof buf);
    } else {
        fg_fwd_args a;
        problem_args(&p, NULL, NULL, NULL, NULL, NULL, &a);
        st = fg_explain(ctx, &a, buf, sizeof buf);
    }
    int status = EXIT_OK;
    if (st != FG_OK) {
        say("explain", "%s", fg_last_error(ctx));
        status = EXIT_FAIL;
    } else {
        puts(buf);
    }
    fg_context_destroy(ctx);
    return status;
}

/* What `run` launches: the public entry point on one set of arguments. */
typedef struct run_launch {
    fg_context *ctx;              /* the context */
    const fg_fwd_args *args;      /* device arguments of fg_attention_fwd */
    const fg_varlen_args *vargs;  /* with model variants: fg_attention_fwd_varlen's instead (NULL: none) */
    CUstream stream;              /* where */
} run_launch;

/* launch_fn of `run`: fg_attention_fwd (or fg_attention_fwd_varlen), its failure sentence into err. */
static fg_status run_launch_one(void *user, int i, fg_error *err) {
    run_launch *r = user;
    (void)i;
    if (r->vargs ? fg_attention_fwd_varlen(r->ctx, r->vargs, r->stream) != FG_OK
                 : fg_attention_fwd(r->ctx, r->args, r->stream) != FG_OK)
        return fg_fail(err, FG_ERR_INTERNAL, "%s failed: %s", r->vargs ? "fg_attention_fwd_varlen" : "fg_attention_fwd",
                       fg_last_error(r->ctx));
    return FG_OK;
}

/* Records a failed driver call in err and jumps to the cleanup (run_gpu's only exit). */
#define RUN_CU(call)                                                                    \
    do {                                                                                \
        CUresult rc_ = (call);                                                          \
        if (rc_ != CUDA_SUCCESS) {                                                      \
            cuda_api_fail(&err, rc_, #call, __FILE__, __LINE__);                        \
            goto fail;                                                                  \
        }                                                                               \
    } while (0)

/* What `run --bwd` launches: fg_attention_bwd on the problem. */
typedef struct run_launch_bwd {
    fg_context *ctx;                  /* the context */
    const fg_bwd_args *args;          /* device arguments of fg_attention_bwd */
    const fg_varlen_bwd_args *vargs;  /* with model variants: fg_attention_bwd_varlen's instead (NULL: none) */
    CUstream stream;                  /* where */
} run_launch_bwd;

/* launch_fn of `run --bwd`: fg_attention_bwd (or fg_attention_bwd_varlen), its failure sentence into err. */
static fg_status run_launch_one_bwd(void *user, int i, fg_error *err) {
    (void)i;
    const run_launch_bwd *r = user;
    fg_status st = r->vargs ? fg_attention_bwd_varlen(r->ctx, r->vargs, r->stream)
                            : fg_attention_bwd(r->ctx, r->args, r->stream);
    return st == FG_OK ? FG_OK : fg_fail(err, st, "%s failed: %s", r->vargs ? "fg_attention_bwd_varlen" : "fg_attention_bwd",
                                         fg_last_error(r->ctx));
}

/* `run --bwd` on the current context: the backward's explain, one call on poisoned gradients checked in full
 * against the CPU references (and dsink, with sinks), then the timing. FG_OK, or the failure in err. */
static fg_status run_bwd(fg_context *ctx, const fg_cuda_api *cu, const problem *p, CUstream stream, fg_error *err) {
    /* what the packed backward refuses, before its forward runs and its buffers are made */
    if (problem_has_variants(p) && variant_bwd_check(ctx, p, err) != FG_OK) return err->status;
    bwd_buffers B;
    fg_status st = bwd_buffers_init(ctx, p, (uint64_t)p->seed, &B, err);
    char explain[4096], line[1024];
    const int serving = B.cu_q != 0;
    if (st == FG_OK && (serving ? explain_bwd_varlen(ctx, p, &B.vdev, explain, sizeof explain)
                                : fg_explain_bwd(ctx, &B.dev, explain, sizeof explain)) == FG_OK)
        printf("%s\n", explain);
    run_launch_bwd rl = {ctx, &B.dev, serving ? &B.vdev : NULL, stream};
    if (st == FG_OK) st = run_launch_one_bwd(&rl, 0, err);
    if (st == FG_OK && cu->cuStreamSynchronize(stream) != CUDA_SUCCESS)
        st = fg_fail(err, FG_ERR_CUDA, "cuStreamSynchronize failed after the backward");
    ref_bwd_report rep;
    dsink_report ds;
    double c0 = now_seconds();
    if (st == FG_OK && (st = bwd_check(cu, &B, p, &rep, B.dsink ? &ds : NULL, err)) == FG_OK) {
        ref_bwd_report_format(&rep, line, sizeof line);
        printf("check: %s (CPU references %.1f s): %s\n", rep.pass ? "PASS" : "FAIL", now_seconds() - c0, line);
        if (!rep.pass)
            st = fg_fail(err, FG_ERR_INTERNAL, "the gradients do not match the CPU reference (see the check line above)");
    }
    if (st == FG_OK && B.dsink) {
        printf("check dsink: %s: %s\n", ds.pass ? "PASS" : "FAIL", dsink_report_format(&ds, line, sizeof line));
        if (!ds.pass) st = fg_fail(err, FG_ERR_INTERNAL, "dsink does not match the CPU reference (see the line above)");
    }
    launch_times t;
    if (st == FG_OK) fg_wait_compiles(ctx); /* the optimized build is timed, never a first call's quick one */
    if (st == FG_OK && (st = time_launches(cu, stream, 3, (int)p->iters, run_launch_one_bwd, &rl, &t, err)) == FG_OK)
        printf("time: median %.4f ms over %lld launches (min %.4f, max %.4f), %.1f TFLOP/s (backward: 2.5x the "
               "forward's FLOPs)\n", t.median, p->iters, t.min, t.max,
               t.median > 0 ? 2.5 * fwd_flops(p) / (t.median * 1e-3) / 1e12 : 0.0);
    cu->cuCtxSynchronize(); /* nothing may still use the buffers freed below */
    bwd_buffers_free(cu, &B);
    return st;
}

/* `run` (the forward) on the current context: explain, one checked call, the timing. FG_OK, or the failure in err. */
static fg_status run_fwd(fg_context *ctx, const fg_cuda_api *cu, const problem *p, CUstream stream, fg_error *err) {
    fwd_buffers B;
    fg_status st = fwd_buffers_init(cu, p, (uint64_t)p->seed, 1, &B, err);
    char explain[4096], line[1024];
    const int serving = problem_has_variants(p);
    fg_varlen_args va;  /* with model variants: the serving call */
    CUdeviceptr ws = 0; /* its workspace */
    if (st == FG_OK && serving) st = variant_call_init(ctx, cu, p, &B, &va, &ws, err);
    if (st == FG_OK && (serving ? fg_explain_varlen(ctx, &va, explain, sizeof explain)
                                : fg_explain(ctx, &B.dev[0], explain, sizeof explain)) == FG_OK)
        printf("%s%s", explain, serving ? "" : "\n"); /* fg_explain_varlen's text ends its line */
    fg_spec ran; /* what the check must model: FP8's sums (the serving calls are 16-bit) */
    if (st == FG_OK && !serving) st = rt_fwd_spec(ctx, &B.dev[0], &ran, err);
    run_launch rl = {ctx, &B.dev[0], serving ? &va : NULL, stream};
    if (st == FG_OK) st = run_launch_one(&rl, 0, err);
    if (st == FG_OK && cu->cuStreamSynchronize(stream) != CUDA_SUCCESS)
        st = fg_fail(err, FG_ERR_CUDA, "cuStreamSynchronize failed after the forward");
    ref_report rep;
    double c0 = now_seconds();
    if (st == FG_OK && (st = fwd_check(cu, &B, p, serving ? NULL : &ran, 0, p->batch, p->heads, 0, &rep, err)) == FG_OK) {
        ref_report_format(&rep, line, sizeof line);
        printf("check: %s (CPU reference %.1f s): %s\n", rep.pass ? "PASS" : "FAIL", now_seconds() - c0, line);
        printf("max error %.3g, bound %.3g\n", rep.max_err, rep.bound);
        if (!rep.pass)
            st = fg_fail(err, FG_ERR_INTERNAL, "the output does not match the CPU reference (see the check line above)");
    }
    launch_times t;
    if (st == FG_OK) fg_wait_compiles(ctx); /* the optimized build is timed, never a first call's quick one */
    if (st == FG_OK && (st = time_launches(cu, stream, 3, (int)p->iters, run_launch_one, &rl, &t, err)) == FG_OK)
        printf("time: median %.4f ms over %lld launches (min %.4f, max %.4f), %.1f TFLOP/s\n", t.median, p->iters,
               t.min, t.max, t.median > 0 ? fwd_flops(p) / (t.median * 1e-3) / 1e12 : 0.0);
    cu->cuCtxSynchronize(); /* nothing may still use the buffers freed below */
    if (ws) cu->cuMemFree(ws);
    fwd_buffers_free(cu, &B);
    return st;
}

/* The body of `run` once the context exists: allocate, fill, launch, check, time (run_fwd or run_bwd). The
 * CLI's own allocations happen in the device's primary context (the one fg_context_create retained), pushed
 * here and popped at the end, on a non-blocking stream made here. Returns the exit status. */
static int run_gpu(fg_context *ctx, const fg_cuda_api *cu, const problem *p) {
    fg_error err;
    fg_error_clear(&err);
    int status = EXIT_FAIL, pushed = 0, retained = 0;
    CUdevice dev;
    CUcontext pctx = NULL, popped;
    CUstream stream = NULL;

    RUN_CU(cu->cuDeviceGet(&dev, (int)p->device));
    RUN_CU(cu->cuDevicePrimaryCtxRetain(&pctx, dev));
    retained = 1;
    RUN_CU(cu->cuCtxPushCurrent(pctx));
    pushed = 1;
    RUN_CU(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    if ((p->bwd ? run_bwd(ctx, cu, p, stream, &err) : run_fwd(ctx, cu, p, stream, &err)) != FG_OK) goto fail;
    status = EXIT_OK;
    goto cleanup;
fail:
    say("run", "%s", err.msg);
cleanup:
    if (stream) cu->cuStreamDestroy(stream);
    if (pushed) cu->cuCtxPopCurrent(&popped);
    if (retained) cu->cuDevicePrimaryCtxRelease(dev);
    return status;
}

/* `flashgen run [problem options] [--iters N] [--seed S] [--bwd]`. */
int cmd_run(int argc, char **argv) {
    problem p;
    int rc = parse_problem("run", argc, argv, 1, &p);
    if (rc < 0) rc = check_variants("run", &p);
    if (rc >= 0) return rc;
    fg_context *ctx = open_context("run", (int)p.device, FG_LOG_INFO, NULL);
    if (!ctx) return EXIT_FAIL;
    fg_error err;
    fg_error_clear(&err);
    const fg_cuda_api *cu = cuda_api_get(&err); /* loaded already: open_context succeeded */
    char variants[256] = "";
    printf("problem: %s%s, batch %lld, seqlen_q %lld, seqlen_k %lld, heads %lld, heads_kv %lld, head_dim %lld%s%s\n",
           p.bwd ? "backward, " : "", dtype_name(p.dtype), p.batch, p.seqlen_q, p.seqlen_k, p.heads, p.heads_kv,
           p.head_dim, p.causal ? ", causal" : "", problem_variants_text(&p, variants, sizeof variants));
    fflush(stdout);
    int status = cu ? run_gpu(ctx, cu, &p) : EXIT_FAIL;
    if (!cu) say("run", "no CUDA device: %s", err.msg);
    fg_context_destroy(ctx);
    return status;
}
