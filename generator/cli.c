/* cli.c: the `flashgen` program, a thin shell over the library for people and scripts.
 *
 * One function per subcommand (cmd_gen, cmd_compile, ...), each parsing its own options with
 * getopt_long and returning the process's exit status: 0 success, 1 failure, 2 usage error. Messages go
 * to stderr as "flashgen <cmd>: <sentence>"; results go to stdout, so `flashgen list cfg.lua | wc -l`
 * and `flashgen gen SPEC > k.cu` work. The usage texts double as the reference documentation (the
 * README quotes them), so they say what each option does and what the defaults are.
 *
 * This is the only place in flashgen that prints without being asked or calls exit(): the library
 * returns statuses and sentences, the program turns them into lines and exit codes. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "args.h"
#include "bundle.h"
#include "cache.h"
#include "compile.h"
#include "config.h"
#include "cuda_api.h"
#include "emit.h"
#include "flashgen.h"
#include "reference.h" /* the CPU reference `run` and `tune` check against; build.ninja links reference.o */
#include "runtime.h"   /* rt_fwd_with_spec and the context's device facts, for `tune` */
#include "space.h"
#include "spec.h"
#include "tunedb.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* ------------------------------------------------------------------ usage texts */

static const char usage_main[] =
    "flashgen " FG_VERSION_STRING ": generates FlashAttention CUDA kernels, compiles them with NVRTC, runs them.\n"
    "\n"
    "usage: flashgen COMMAND [OPTIONS] [ARGUMENTS]\n"
    "       flashgen COMMAND --help      the options of one command\n"
    "       flashgen --version\n"
    "\n"
    "commands:\n"
    "  gen SPEC                 print the CUDA source of one kernel variant\n"
    "  compile SPEC -o FILE     compile one variant with NVRTC and write its cubin\n"
    "  list CONFIG              print the variants a Lua config lists, one canonical spec per line\n"
    "  bundle CONFIG -o FILE    compile every variant of a config, in parallel, into one bundle file\n"
    "  run                      run one forward pass on the GPU, check every element against the CPU\n"
    "                           reference, and time it\n"
    "  explain                  say which kernel `run` would launch for a problem, and why\n"
    "  tune SPACE               time every candidate of a tuning space on this GPU and record them in\n"
    "                           the GPU's tuning database, which dispatch consults (--show prints it)\n"
    "  info                     versions, the disk cache, and the GPUs flashgen sees\n"
    "  cache ls|verify|clear    list, check or empty the disk cache of compiled kernels\n"
    "\n"
    "SPEC names one variant by its compile-time parameters, as key=value pairs separated by commas or\n"
    "spaces (one argument or several):\n"
    "  arch=sm_90a dtype=bf16 head_dim=128 [causal=1] [kind=fwd] [block_m=N block_n=N warps=N stages=N]\n"
    "arch, dtype (fp16, bf16) and head_dim are required; kind defaults to fwd, the only family so far;\n"
    "causal defaults to 0; tile fields left out come from the default tile policy. The canonical form,\n"
    "which `list` prints and caches and bundles use as the variant's name, has every key, sorted:\n"
    "  arch=sm_90a,block_m=128,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=8\n"
    "A spec that breaks a validation rule is refused with the rule's sentence. The rules, in order:\n"
    "%s\n"
    "\n"
    "CONFIG is a Lua file calling variants{...} (cartesian products of fields) and tile_policy{...}\n"
    "(tile overrides); it runs in a sandbox (no io/os/require, capped memory and instructions).\n"
    "\n"
    "environment:\n"
    "  FLASHGEN_CACHE_DIR  disk cache directory (default $XDG_CACHE_HOME/flashgen, else ~/.cache/flashgen);\n"
    "                      it must be owned by you and not writable by group or others\n"
    "  FLASHGEN_DUMP       a directory: `run` writes the source, PTX and NVRTC log of each JIT compile there\n"
    "\n"
    "exit status: 0 on success, 1 on failure (stderr says what failed and why), 2 on a usage error.\n";

static const char usage_gen[] =
    "usage: flashgen gen SPEC...\n"
    "\n"
    "Prints the CUDA source flashgen would compile for the variant SPEC: a prelude of #defines for the\n"
    "spec followed by the template pieces, self-contained (no #include), byte-for-byte deterministic.\n"
    "Unset tile fields are filled from the default tile policy, then the spec is validated; a refused\n"
    "spec prints the broken rule's sentence and exits 1.\n"
    "\n"
    "example: flashgen gen arch=sm_90a dtype=bf16 head_dim=128 causal=1 > kernel.cu\n";

static const char usage_compile[] =
    "usage: flashgen compile SPEC... -o FILE [--ptx FILE] [--log]\n"
    "\n"
    "Compiles the variant SPEC with NVRTC (no GPU needed: the target is the spec's arch) and writes the\n"
    "cubin to FILE atomically (a complete file or none). Prints one line: the canonical name, compile\n"
    "seconds, registers per thread, spill bytes (stores/loads) and dynamic shared memory bytes.\n"
    "\n"
    "  -o, --output FILE   where the cubin goes (required)\n"
    "      --ptx FILE      also write the PTX text\n"
    "      --log           print the NVRTC log, including the ptxas resource report\n";

static const char usage_list[] =
    "usage: flashgen list CONFIG [--arch LIST]\n"
    "\n"
    "Runs the Lua config CONFIG and prints every variant it lists, one canonical spec per line, after\n"
    "filling tiles from the (possibly overridden) tile policy, validating, and dropping duplicates.\n"
    "Config errors are reported as file:line.\n"
    "\n"
    "      --arch LIST     comma-separated targets (sm_80,sm_90a) replacing every variants{} arch field\n";

static const char usage_bundle[] =
    "usage: flashgen bundle CONFIG -o FILE [--arch LIST] [-j N] [--emit-c] [--symbol NAME]\n"
    "\n"
    "Compiles every variant CONFIG lists with N threads and writes them as one bundle file, which\n"
    "fg_bundle_load() reads before any JIT compile. Progress goes to stderr, a line per finished variant:\n"
    "  [ 3/40] 0.8 s  arch=sm_90a,block_m=128,...  (172 regs, 0 spill)\n"
    "then a summary with the wall time. The bundle is refused (exit 1, nothing written) if any variant\n"
    "fails to compile or spills registers to local memory; the failures are named. FILE is written\n"
    "atomically only after every compile succeeded, so a failed or interrupted run leaves no FILE.\n"
    "\n"
    "  -o, --output FILE   the bundle file (required)\n"
    "      --arch LIST     comma-separated targets replacing every variants{} arch field\n"
    "  -j, --jobs N        parallel compiles (default: the number of online CPUs)\n"
    "      --emit-c        write a C source instead: `const unsigned char NAME[]` and\n"
    "                      `const unsigned long NAME_size`, for fg_bundle_load_memory()\n"
    "      --symbol NAME   the array's name with --emit-c (default flashgen_bundle)\n";

static const char usage_run[] =
    "usage: flashgen run [--dtype fp16|bf16] [--batch B] [--seqlen-q N] [--seqlen-k N] [--heads H]\n"
    "                    [--heads-kv H] [--head-dim D] [--causal] [--iters N] [--seed S] [--device N]\n"
    "\n"
    "Runs one forward pass on a GPU through the public API and checks it: random N(0,1) inputs, the output\n"
    "poisoned with NaN before the launch, every element compared with the CPU reference (pass when\n"
    "max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5, nothing NaN/Inf, the LSE within tolerance).\n"
    "Then it times --iters launches (after 3 warm-up launches) with CUDA events and prints the median time\n"
    "and TFLOP/s (4*b*h*sq*sk*d FLOPs, half that when causal). The first launch may JIT-compile the\n"
    "kernel (logged). Exits 1 if the check fails or there is no GPU.\n"
    "\n"
    "      --dtype T       fp16 or bf16 (default bf16)\n"
    "      --batch B       batch size (default 2)\n"
    "      --seqlen-q N    query length (default 1024)\n"
    "      --seqlen-k N    key/value length (default: the query length)\n"
    "      --heads H       query heads (default 8)\n"
    "      --heads-kv H    key/value heads, dividing H (default: H; fewer is GQA/MQA)\n"
    "      --head-dim D    head dimension (default 128)\n"
    "      --causal        bottom-right aligned causal mask\n"
    "      --iters N       timed launches (default 20)\n"
    "      --seed S        random seed of the inputs (default 0)\n"
    "      --device N      CUDA device ordinal (default 0)\n";

static const char usage_explain[] =
    "usage: flashgen explain [--dtype fp16|bf16] [--batch B] [--seqlen-q N] [--seqlen-k N] [--heads H]\n"
    "                        [--heads-kv H] [--head-dim D] [--causal] [--device N]\n"
    "\n"
    "Says which kernel variant `run` (or fg_attention_fwd) would launch for the problem, where its code\n"
    "would come from (memory, disk cache, bundle, or a JIT compile) and why those tiles. Needs a GPU,\n"
    "because the choice depends on it; compiles and launches nothing. Options and defaults as for `run`.\n";

static const char usage_tune[] =
    "usage: flashgen tune SPACE [--device N] [--budget SECONDS] [--db FILE] [-j N] [--iters N]\n"
    "       flashgen tune --show [FILE]\n"
    "\n"
    "Times every candidate of the tuning space SPACE (a Lua file calling space{...}, for example\n"
    "configs/tune_fwd.lua) on one GPU and records each one in that GPU's tuning database; from then on\n"
    "fg_attention_fwd runs the fastest variant measured for the nearest problem bucket.\n"
    "\n"
    "Candidates that validation refuses, or whose shared memory the GPU cannot give, are recorded as\n"
    "refused with the rule's sentence. The others are compiled with NVRTC on N threads while the GPU\n"
    "times the ones already compiled (their cubins go to the disk cache, where the timing loads them;\n"
    "`flashgen cache clear` removes them). One that spills registers is recorded as spilled, one that\n"
    "fails to compile or launch as failed. Each remaining candidate runs once on random N(0,1) inputs\n"
    "with its output poisoned with NaN, and a slice of the output (the first batch, the first two heads,\n"
    "the last rows up to a fixed CPU cost) is compared with the CPU reference by `run`'s rule; a\n"
    "mismatch is recorded as wrong and never timed. Then 3 warm-up and --iters timed launches on a\n"
    "non-blocking stream, one CUDA event between consecutive launches; the median time and TFLOP/s\n"
    "(4*b*h*sq*sk*d, half when causal) are recorded. Inputs smaller than the GPU's L2 cache are\n"
    "rotated over several copies so no launch finds them cached. A problem's batch x heads is split\n"
    "as heads = 2048 / head_dim (a model width of 2048), batch = batch_heads / heads.\n"
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
    "      --device N      CUDA device ordinal (default 0)\n"
    "      --budget S      start no new candidate after S seconds; save and exit 0\n"
    "      --db FILE       the database (default: tune-<gpu>-sm<arch>-<sms>sm.lua in the disk cache\n"
    "                      directory, where fg_context_create looks for it)\n"
    "  -j, --jobs N        parallel NVRTC compiles (default: the number of online CPUs)\n"
    "      --iters N       timed launches per candidate (default 20)\n"
    "      --show [FILE]   print the database FILE (default: --db, else this GPU's) as a table and exit;\n"
    "                      with a FILE no GPU is needed, and the file is not checked against one\n";

static const char usage_info[] =
    "usage: flashgen info\n"
    "\n"
    "Prints the flashgen and NVRTC versions, the disk cache location with its entry count and size (or\n"
    "why it is unusable), and for each GPU: name, compute capability, SM count, memory, driver version\n"
    "and the arch flashgen compiles for on it (sm_90a on compute capability 9.0). Without a GPU it says\n"
    "why and still exits 0.\n";

static const char usage_cache[] =
    "usage: flashgen cache ls|verify|clear [--dir DIR]\n"
    "\n"
    "  ls       one line per entry: file, variant name, cubin bytes (bad entries say why)\n"
    "  verify   checks every entry's header and checksum; exits 1 naming each bad one\n"
    "  clear    removes every entry (and stale temporary files); other files are kept\n"
    "\n"
    "      --dir DIR       the cache directory (default: $FLASHGEN_CACHE_DIR, else\n"
    "                      $XDG_CACHE_HOME/flashgen, else ~/.cache/flashgen)\n";

/* ------------------------------------------------------------------ messages and option helpers */

/* Prints "flashgen CMD: <sentence>" on stderr. */
static void say(const char *cmd, const char *fmt, ...) FG_PRINTF(2, 3);
static void say(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "flashgen %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Prints a usage error (a sentence plus where to read more) and returns EXIT_USAGE. */
static int usage_error(const char *cmd, const char *fmt, ...) FG_PRINTF(2, 3);
static int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "flashgen %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; see 'flashgen %s --help'\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

/* Turns getopt_long's '?' (unknown option) or ':' (missing argument) into a usage error naming the
 * option as the user typed it. Returns EXIT_USAGE. */
static int bad_option(const char *cmd, char **argv, int c) {
    const char *typed = optind > 0 ? argv[optind - 1] : "?";
    char shortname[3] = {'-', (char)optopt, '\0'};
    /* For a short option getopt reports the letter in optopt (it may sit inside a cluster like -jx);
     * for a long one optopt is 0 (unknown) or the option's value, and the word is argv[optind-1]. */
    int is_short = optopt > 0 && optopt < 128 && !(typed[0] == '-' && typed[1] == '-');
    const char *name = is_short ? shortname : typed;
    if (c == ':') return usage_error(cmd, "option '%s' needs a value", name);
    return usage_error(cmd, "unknown option '%s'", name);
}

/* Parses a whole decimal integer from `text` for option `opt` into *out, requiring min <= value <= max.
 * Garbage, signs below min (negatives) and overflow are usage errors naming the option: returns 0 or
 * EXIT_USAGE (already printed). */
static int parse_number(const char *cmd, const char *opt, const char *text, long long min, long long max,
                        long long *out) {
    const char *p = text;
    while (*p == ' ') p++;
    if (*p == '+') p++;
    if (*p == '-' || *p < '0' || *p > '9') goto bad;
    errno = 0;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (errno || *end != '\0' || v < min || v > max) goto bad;
    *out = v;
    return 0;
bad:
    return usage_error(cmd, "%s expects a whole number from %lld to %lld, got '%s'", opt, min, max, text);
}

/* Returns 1 if `text` is a C identifier of at most 200 characters (a usable --symbol). */
static int is_c_identifier(const char *text) {
    size_t n = strlen(text);
    if (n == 0 || n > 200 || (text[0] >= '0' && text[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return 0;
    }
    return 1;
}

/* Checks, before any long work, that the directory that will hold `path` exists and is writable, so a
 * typo in -o fails in a second instead of after every compile. Returns 0, or 1 after printing why. */
static int check_output_dir(const char *cmd, const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat st;
    if (stat(dir, &st) != 0) {
        say(cmd, "cannot write '%s': directory '%s' does not exist (%s)", path, dir, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        say(cmd, "cannot write '%s': '%s' is not a directory", path, dir);
        return 1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        say(cmd, "cannot write '%s': directory '%s' is not writable (%s)", path, dir, strerror(errno));
        return 1;
    }
    return 0;
}

/* Seconds on the monotonic clock. */
static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The size of a file, or -1 when it cannot be stat'ed (only for messages). */
static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* ------------------------------------------------------------------ spec arguments */

/* Returns 1 if the spec text has a `key=` token (tokens split at commas and whitespace). */
static int spec_has_key(const char *text, const char *key) {
    size_t klen = strlen(key);
    const char *p = text;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') return 1;
        p += strcspn(p, ", \t\r\n");
    }
    return 0;
}

/* Builds a complete, validated spec from the positional arguments argv[first..argc) joined by spaces:
 * kind defaults to fwd, unset tiles are filled from the default tile policy. Returns 0, EXIT_USAGE when
 * no spec was given, or EXIT_FAIL after printing the parser's or the broken rule's sentence. */
static int spec_from_args(const char *cmd, int argc, char **argv, int first, fg_spec *spec) {
    if (first >= argc) return usage_error(cmd, "a SPEC is required (for example arch=sm_90a dtype=bf16 head_dim=128)");
    size_t len = 16;
    for (int i = first; i < argc; i++) len += strlen(argv[i]) + 1;
    char *text = malloc(len);
    if (!text) {
        say(cmd, "out of memory reading the spec");
        return EXIT_FAIL;
    }
    text[0] = '\0';
    for (int i = first; i < argc; i++) {
        strcat(text, argv[i]);
        strcat(text, " ");
    }
    /* fwd is the only kernel family, so asking people to type it would be ceremony. */
    char *full = text;
    if (!spec_has_key(text, "kind")) {
        full = malloc(len + 9);
        if (!full) {
            free(text);
            say(cmd, "out of memory reading the spec");
            return EXIT_FAIL;
        }
        snprintf(full, len + 9, "kind=fwd %s", text);
        free(text);
    }
    fg_error err;
    fg_error_clear(&err);
    fg_status st = spec_parse(full, spec, &err);
    free(full);
    if (st != FG_OK) {
        say(cmd, "%s", err.msg);
        return EXIT_FAIL;
    }
    fg_tile_policy policy;
    if (tile_policy_init_default(&policy, &err) != FG_OK) {
        say(cmd, "%s", err.msg);
        return EXIT_FAIL;
    }
    st = spec_fill_tiles(spec, &policy, &err);
    tile_policy_free(&policy);
    if (st != FG_OK) {
        /* No tile rule covers an unsupported head_dim, arch or dtype; the validation rule that refuses
         * such a field explains the real problem better than "no tile rule". The rules on those fields
         * come before tiles_set and are the ones that report FG_ERR_UNSUPPORTED on a tile-less spec. */
        fg_error verr;
        fg_error_clear(&verr);
        if (spec_validate(spec, &verr) == FG_ERR_UNSUPPORTED) say(cmd, "%s", verr.msg);
        else say(cmd, "%s", err.msg);
        return EXIT_FAIL;
    }
    if (spec_validate(spec, &err) != FG_OK) {
        say(cmd, "%s", err.msg);
        return EXIT_FAIL;
    }
    return 0;
}

/* ------------------------------------------------------------------ gen */

/* `flashgen gen SPEC...`: prints the emitted source. */
static int cmd_gen(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_gen, stdout);
            return EXIT_OK;
        }
        return bad_option("gen", argv, c);
    }
    fg_spec spec;
    int rc = spec_from_args("gen", argc, argv, optind, &spec);
    if (rc) return rc;
    char *src = NULL;
    size_t len = 0;
    fg_error err;
    fg_error_clear(&err);
    if (emit_source(&spec, &src, &len, &err) != FG_OK) {
        say("gen", "%s", err.msg);
        return EXIT_FAIL;
    }
    size_t wrote = fwrite(src, 1, len, stdout);
    free(src);
    if (wrote != len || fflush(stdout) != 0) {
        say("gen", "could not write the source to stdout (%s)", strerror(errno));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------ compile */

/* `flashgen compile SPEC... -o FILE [--ptx FILE] [--log]`. */
static int cmd_compile(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"ptx", required_argument, NULL, 'p'},
                                         {"log", no_argument, NULL, 'l'},
                                         {NULL, 0, NULL, 0}};
    const char *out = NULL, *ptx = NULL;
    int want_log = 0, c;
    while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(usage_compile, stdout); return EXIT_OK;
        case 'o': out = optarg; break;
        case 'p': ptx = optarg; break;
        case 'l': want_log = 1; break;
        default: return bad_option("compile", argv, c);
        }
    }
    if (!out) return usage_error("compile", "-o FILE is required (where the cubin goes)");
    fg_spec spec;
    int rc = spec_from_args("compile", argc, argv, optind, &spec);
    if (rc) return rc;
    if (check_output_dir("compile", out) || (ptx && check_output_dir("compile", ptx))) return EXIT_FAIL;

    char name[FG_SPEC_NAME_MAX];
    spec_format(&spec, name, sizeof name);
    fg_compile_result r;
    fg_error err;
    fg_error_clear(&err);
    if (compile_spec(&spec, ptx != NULL, &r, &err) != FG_OK) {
        if (want_log && r.log && r.log[0]) fprintf(stderr, "%s\n", r.log);
        say("compile", "%s", err.msg);
        compile_result_free(&r);
        return EXIT_FAIL;
    }
    if (want_log) printf("%s%s", r.log ? r.log : "", r.log && r.log[0] && r.log[strlen(r.log) - 1] != '\n' ? "\n" : "");
    int status = EXIT_OK;
    if (fg_write_file_atomic(out, r.cubin, r.cubin_size, &err) != FG_OK ||
        (ptx && fg_write_file_atomic(ptx, r.ptx, strlen(r.ptx), &err) != FG_OK)) {
        say("compile", "%s", err.msg);
        status = EXIT_FAIL;
    } else {
        printf("%s  %.2f s  %d registers  %d bytes spill stores  %d bytes spill loads  %zu bytes shared memory\n",
               name, r.seconds, r.registers, r.spill_stores, r.spill_loads, spec_smem_bytes(&spec));
        if (r.spill_stores > 0)
            say("compile", "warning: %s spills %d bytes to local memory; `flashgen bundle` would refuse it", name,
                r.spill_stores);
    }
    compile_result_free(&r);
    return status;
}

/* ------------------------------------------------------------------ list */

/* `flashgen list CONFIG [--arch LIST]`. */
static int cmd_list(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"arch", required_argument, NULL, 'a'},
                                         {NULL, 0, NULL, 0}};
    const char *arch = NULL;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(usage_list, stdout); return EXIT_OK;
        case 'a': arch = optarg; break;
        default: return bad_option("list", argv, c);
        }
    }
    if (optind >= argc) return usage_error("list", "a CONFIG file is required");
    if (optind + 1 < argc) return usage_error("list", "one CONFIG file is expected, got also '%s'", argv[optind + 1]);
    fg_config cfg;
    fg_error err;
    fg_error_clear(&err);
    if (config_load_file(argv[optind], arch, &cfg, &err) != FG_OK) {
        say("list", "%s", err.msg);
        return EXIT_FAIL;
    }
    for (int i = 0; i < cfg.count; i++) {
        char name[FG_SPEC_NAME_MAX];
        if (spec_format(&cfg.variants[i], name, sizeof name) < 0) {
            say("list", "variant %d of %s does not format as a spec (a flashgen bug)", i + 1, argv[optind]);
            config_free(&cfg);
            return EXIT_FAIL;
        }
        puts(name);
    }
    config_free(&cfg);
    if (fflush(stdout) != 0) {
        say("list", "could not write to stdout (%s)", strerror(errno));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------ bundle */

/* One variant's compile, filled by whichever worker took it. */
typedef struct bundle_job {
    fg_spec spec;                 /* the variant */
    char name[FG_SPEC_NAME_MAX];  /* its canonical text */
    fg_compile_result result;     /* cubin and ptxas figures, valid when ok */
    int ok;                       /* 1 when NVRTC succeeded */
    char why[1024];               /* the failure sentence when not ok */
} bundle_job;

/* The work queue the workers share. */
typedef struct bundle_pool {
    bundle_job *jobs;       /* every variant, in config order */
    int count;              /* how many */
    int next;               /* the next job to take (under lock) */
    int done;               /* finished jobs, for the progress counter (under lock) */
    int width;              /* digits of count, so progress lines align */
    pthread_mutex_t lock;   /* guards next, done and stderr lines */
} bundle_pool;

/* Worker: takes jobs until none are left, compiles each, prints a progress line per finished job. */
static void *bundle_worker(void *arg) {
    bundle_pool *pool = arg;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        int i = pool->next < pool->count ? pool->next++ : -1;
        pthread_mutex_unlock(&pool->lock);
        if (i < 0) return NULL;
        bundle_job *job = &pool->jobs[i];
        fg_error err;
        fg_error_clear(&err);
        double t0 = now_seconds();
        job->ok = compile_spec(&job->spec, 0, &job->result, &err) == FG_OK;
        double secs = job->ok ? job->result.seconds : now_seconds() - t0;
        if (!job->ok) snprintf(job->why, sizeof job->why, "%s", err.msg);
        pthread_mutex_lock(&pool->lock);
        int n = ++pool->done;
        if (job->ok)
            fprintf(stderr, "[%*d/%d] %.1f s  %s  (%d regs, %d spill)\n", pool->width, n, pool->count, secs,
                    job->name, job->result.registers, job->result.spill_stores);
        else
            fprintf(stderr, "[%*d/%d] %.1f s  %s  FAILED\n", pool->width, n, pool->count, secs, job->name);
        pthread_mutex_unlock(&pool->lock);
    }
}

/* Starts up to n threads running fn(arg) into threads[] and returns how many started (*why_errno: why
 * the first that could not). The threads get 32 MiB stacks, because NVRTC's front end recurses deeply
 * on template-heavy source, and run with SIGINT, SIGTERM and SIGHUP blocked, so those signals reach the
 * main thread (which decides what an interrupt means) and never a compile worker. */
static int start_threads(void *(*fn)(void *), void *arg, int n, pthread_t *threads, int *why_errno) {
    sigset_t hold, old;
    sigemptyset(&hold);
    sigaddset(&hold, SIGINT);
    sigaddset(&hold, SIGTERM);
    sigaddset(&hold, SIGHUP);
    int masked = pthread_sigmask(SIG_BLOCK, &hold, &old) == 0; /* new threads inherit the mask */
    pthread_attr_t attr;
    int have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr) pthread_attr_setstacksize(&attr, (size_t)32 << 20);
    int started = 0;
    for (int t = 0; t < n; t++) {
        int e = pthread_create(&threads[started], have_attr ? &attr : NULL, fn, arg);
        if (e != 0) {
            *why_errno = e;
            break;
        }
        started++;
    }
    if (have_attr) pthread_attr_destroy(&attr);
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    return started;
}

/* Starts `nthreads` workers over the pool and waits for them. Threads that cannot be created are made
 * up for by the ones that were (each takes jobs until none are left). Returns 0, or -1 when no thread
 * at all could be started (errno-style code in *why_errno). */
static int bundle_run_pool(bundle_pool *pool, int nthreads, int *why_errno) {
    pthread_t *threads = calloc((size_t)nthreads, sizeof *threads);
    if (!threads) {
        *why_errno = ENOMEM;
        return -1;
    }
    int started = start_threads(bundle_worker, pool, nthreads, threads, why_errno);
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
    free(threads);
    return started > 0 ? 0 : -1;
}

/* `flashgen bundle CONFIG -o FILE [--arch LIST] [-j N] [--emit-c] [--symbol NAME]`. */
static int cmd_bundle(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"arch", required_argument, NULL, 'a'},
                                         {"jobs", required_argument, NULL, 'j'},
                                         {"emit-c", no_argument, NULL, 'c'},
                                         {"symbol", required_argument, NULL, 's'},
                                         {NULL, 0, NULL, 0}};
    const char *out = NULL, *arch = NULL, *symbol = "flashgen_bundle";
    long long jobs = 0;
    int emit_c = 0, symbol_given = 0, c;
    while ((c = getopt_long(argc, argv, ":ho:j:", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(usage_bundle, stdout); return EXIT_OK;
        case 'o': out = optarg; break;
        case 'a': arch = optarg; break;
        case 'j':
            if (parse_number("bundle", "-j/--jobs", optarg, 1, 1024, &jobs)) return EXIT_USAGE;
            break;
        case 'c': emit_c = 1; break;
        case 's': symbol = optarg; symbol_given = 1; break;
        default: return bad_option("bundle", argv, c);
        }
    }
    if (optind >= argc) return usage_error("bundle", "a CONFIG file is required");
    if (optind + 1 < argc) return usage_error("bundle", "one CONFIG file is expected, got also '%s'", argv[optind + 1]);
    if (!out) return usage_error("bundle", "-o FILE is required (where the bundle goes)");
    if (symbol_given && !emit_c) return usage_error("bundle", "--symbol only applies with --emit-c");
    if (!is_c_identifier(symbol))
        return usage_error("bundle", "--symbol '%s' is not a C identifier (letters, digits, '_', not starting with a digit)",
                           symbol);
    const char *config_path = argv[optind];
    if (check_output_dir("bundle", out)) return EXIT_FAIL;

    fg_config cfg;
    fg_error err;
    fg_error_clear(&err);
    if (config_load_file(config_path, arch, &cfg, &err) != FG_OK) {
        say("bundle", "%s", err.msg);
        return EXIT_FAIL;
    }
    if (cfg.count == 0) {
        say("bundle", "%s lists no variants: nothing to bundle", config_path);
        config_free(&cfg);
        return EXIT_FAIL;
    }
    if (jobs == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        jobs = cpus > 0 ? cpus : 1;
    }
    if (jobs > cfg.count) jobs = cfg.count;

    bundle_pool pool;
    memset(&pool, 0, sizeof pool);
    pool.jobs = calloc((size_t)cfg.count, sizeof *pool.jobs);
    if (!pool.jobs) {
        say("bundle", "out of memory for %d variants", cfg.count);
        config_free(&cfg);
        return EXIT_FAIL;
    }
    pool.count = cfg.count;
    for (int n = cfg.count; n > 0; n /= 10) pool.width++;
    for (int i = 0; i < cfg.count; i++) {
        pool.jobs[i].spec = cfg.variants[i];
        spec_format(&cfg.variants[i], pool.jobs[i].name, sizeof pool.jobs[i].name);
    }
    config_free(&cfg);
    pthread_mutex_init(&pool.lock, NULL);

    fprintf(stderr, "bundle: compiling %d variants of %s with %lld threads (NVRTC %s)\n", pool.count, config_path,
            jobs, compile_nvrtc_version());
    double t0 = now_seconds();
    int why = 0, status = EXIT_OK;
    if (bundle_run_pool(&pool, (int)jobs, &why) != 0) {
        say("bundle", "could not start any compile thread (%s)", strerror(why));
        status = EXIT_FAIL;
        goto done;
    }
    double wall = now_seconds() - t0, cpu = 0;
    int failed = 0, spilled = 0;
    for (int i = 0; i < pool.count; i++) {
        bundle_job *job = &pool.jobs[i];
        if (!job->ok) {
            say("bundle", "%s failed: %s", job->name, job->why);
            failed++;
            continue;
        }
        cpu += job->result.seconds;
        if (job->result.spill_stores > 0) {
            say("bundle", "%s spills registers (%d bytes of stores, %d of loads): give it other tiles or drop it",
                job->name, job->result.spill_stores, job->result.spill_loads);
            spilled++;
        }
    }
    if (failed || spilled) {
        say("bundle", "refusing to write %s: %d of %d variants failed to compile and %d spill (%.1f s wall)", out,
            failed, pool.count, spilled, wall);
        status = EXIT_FAIL;
        goto done;
    }

    fg_bundle b = {NULL, 0};
    for (int i = 0; i < pool.count && status == EXIT_OK; i++) {
        if (bundle_add(&b, pool.jobs[i].name, pool.jobs[i].result.cubin, pool.jobs[i].result.cubin_size, &err) != FG_OK) {
            say("bundle", "%s", err.msg);
            status = EXIT_FAIL;
        }
    }
    if (status == EXIT_OK) {
        /* Ctrl-C during the write would leave a temporary file behind; hold such signals until the
         * rename is done (they are delivered right after, with FILE complete). */
        sigset_t hold, old;
        sigemptyset(&hold);
        sigaddset(&hold, SIGINT);
        sigaddset(&hold, SIGTERM);
        sigaddset(&hold, SIGHUP);
        int held = sigprocmask(SIG_BLOCK, &hold, &old) == 0;
        fg_status st = emit_c ? bundle_write_c(out, symbol, &b, &err) : bundle_write(out, &b, &err);
        if (held) sigprocmask(SIG_SETMASK, &old, NULL);
        if (st != FG_OK) {
            say("bundle", "%s", err.msg);
            status = EXIT_FAIL;
        } else {
            fprintf(stderr, "bundle: %d variants in %.1f s wall (%.1f s of compiling, %lld threads); wrote %s (%lld bytes%s)\n",
                    pool.count, wall, cpu, jobs, out, file_size(out), emit_c ? ", C source" : "");
        }
    }
    bundle_free(&b);
done:
    for (int i = 0; i < pool.count; i++) compile_result_free(&pool.jobs[i].result);
    free(pool.jobs);
    pthread_mutex_destroy(&pool.lock);
    return status;
}

/* ------------------------------------------------------------------ run and explain */

/* One attention problem, from the command line. */
typedef struct problem {
    fg_dtype dtype;          /* Q/K/V/O element type */
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
} problem;

enum { OPT_DTYPE = 256, OPT_BATCH, OPT_SQ, OPT_SK, OPT_HEADS, OPT_HKV, OPT_D, OPT_CAUSAL, OPT_ITERS, OPT_SEED, OPT_DEVICE };

/* The options `run` and `explain` share; `run` adds --iters and --seed. */
#define PROBLEM_OPTIONS                                                                                        \
    {"help", no_argument, NULL, 'h'}, {"dtype", required_argument, NULL, OPT_DTYPE},                          \
        {"batch", required_argument, NULL, OPT_BATCH}, {"seqlen-q", required_argument, NULL, OPT_SQ},         \
        {"seqlen-k", required_argument, NULL, OPT_SK}, {"heads", required_argument, NULL, OPT_HEADS},         \
        {"heads-kv", required_argument, NULL, OPT_HKV}, {"head-dim", required_argument, NULL, OPT_D},         \
        {"causal", no_argument, NULL, OPT_CAUSAL}, {"device", required_argument, NULL, OPT_DEVICE}

/* Parses the problem options of `run` (timing != 0) or `explain` into *p. Returns -1 to go on, or the
 * exit status to return now (0 after --help, EXIT_USAGE after a printed usage error). */
static int parse_problem(const char *cmd, int argc, char **argv, int timing, problem *p) {
    static const struct option run_opts[] = {PROBLEM_OPTIONS,
                                             {"iters", required_argument, NULL, OPT_ITERS},
                                             {"seed", required_argument, NULL, OPT_SEED},
                                             {NULL, 0, NULL, 0}};
    static const struct option explain_opts[] = {PROBLEM_OPTIONS, {NULL, 0, NULL, 0}};
    *p = (problem){FG_DTYPE_BF16, 2, 1024, -1, 8, -1, 128, 0, 20, 0, 0};
    int c;
    while ((c = getopt_long(argc, argv, ":h", timing ? run_opts : explain_opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'h': fputs(timing ? usage_run : usage_explain, stdout); return EXIT_OK;
        case OPT_DTYPE:
            if (strcmp(optarg, "fp16") == 0) p->dtype = FG_DTYPE_F16;
            else if (strcmp(optarg, "bf16") == 0) p->dtype = FG_DTYPE_BF16;
            else return usage_error(cmd, "--dtype must be fp16 or bf16, got '%s'", optarg);
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
        default: return bad_option(cmd, argv, c);
        }
        if (bad) return EXIT_USAGE;
    }
    if (optind < argc) return usage_error(cmd, "unexpected argument '%s' (the problem is given by options)", argv[optind]);
    if (p->seqlen_k < 0) p->seqlen_k = p->seqlen_q;
    if (p->heads_kv < 0) p->heads_kv = p->heads;
    if (p->heads % p->heads_kv != 0)
        return usage_error(cmd, "--heads-kv %lld must divide --heads %lld (each K/V head serves a group of query heads)",
                           p->heads_kv, p->heads);
    /* Each option is bounded, but their product can still pass 2^63; the host must also hold every
     * tensor and the CPU reference must finish, so refuse sizes no machine can check. */
    double elems = (double)p->batch * (double)(p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k) *
                   (double)p->heads * (double)p->head_dim;
    if (elems > 0x1p40)
        return usage_error(cmd, "the problem has %.3g elements per tensor (batch x seqlen x heads x head_dim); "
                           "the limit is 2^40", elems);
    return -1;
}

/* A contiguous [d0, d1, d2, d3] tensor description (or [d0, d1, d2] when d3 is 0) at `data`. */
static fg_tensor contiguous(void *data, fg_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = d3 ? 4 : 3;
    int64_t shape[4] = {d0, d1, d2, d3};
    int64_t stride = 1;
    for (int i = t.ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = stride;
        stride *= shape[i];
    }
    return t;
}

/* Fills args with contiguous Q/K/V/O/LSE tensors of problem p at the given (device) addresses. */
static void problem_args(const problem *p, void *q, void *k, void *v, void *o, void *lse, fg_fwd_args *a) {
    memset(a, 0, sizeof *a);
    a->q = contiguous(q, p->dtype, p->batch, p->seqlen_q, p->heads, p->head_dim);
    a->k = contiguous(k, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->head_dim);
    a->v = contiguous(v, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->head_dim);
    a->o = contiguous(o, p->dtype, p->batch, p->seqlen_q, p->heads, p->head_dim);
    a->lse = contiguous(lse, FG_DTYPE_F32, p->batch, p->heads, p->seqlen_q, 0);
    a->causal = p->causal;
}

/* Creates a context on `device` logging at `level` (run and explain use FG_LOG_INFO, so a JIT compile
 * is visible, never a silent pause). tuning_db is passed to fg_context_options (NULL: this GPU's
 * default file; "": none). Returns the context, or NULL after printing "no CUDA device: ..." or the
 * failure. */
static fg_context *open_context(const char *cmd, int device, fg_log_level level, const char *tuning_db) {
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

/* `flashgen explain [problem options]`. */
static int cmd_explain(int argc, char **argv) {
    problem p;
    int rc = parse_problem("explain", argc, argv, 0, &p);
    if (rc >= 0) return rc;
    fg_context *ctx = open_context("explain", (int)p.device, FG_LOG_INFO, NULL);
    if (!ctx) return EXIT_FAIL;
    fg_fwd_args a;
    problem_args(&p, NULL, NULL, NULL, NULL, NULL, &a);
    char buf[4096];
    int status = EXIT_OK;
    if (fg_explain(ctx, &a, buf, sizeof buf) != FG_OK) {
        say("explain", "%s", fg_last_error(ctx));
        status = EXIT_FAIL;
    } else {
        puts(buf);
    }
    fg_context_destroy(ctx);
    return status;
}

/* ---- GPU buffers, the reference check and the timing loop, shared by `run` and `tune` ---- */

#define FWD_MAX_COPIES 8 /* most device copies of a problem's tensors a timing rotates over */

/* The host inputs and device tensors of one forward problem. Zeroed, it holds nothing; fwd_buffers_free
 * frees whatever a (possibly failed) fwd_buffers_init allocated. */
typedef struct fwd_buffers {
    size_t esz;                 /* bytes per Q/K/V/O element */
    size_t nq, nkv, nlse;       /* elements of Q (and O), of K (and V), of the LSE */
    uint16_t *hq, *hk, *hv;     /* host inputs, contiguous, filled with N(0,1) */
    fg_fwd_args host;           /* views of the host inputs (o and lse have no data) */
    int ncopies;                /* device copies that are complete */
    CUdeviceptr q[FWD_MAX_COPIES], k[FWD_MAX_COPIES], v[FWD_MAX_COPIES]; /* inputs per copy (0: none) */
    CUdeviceptr o[FWD_MAX_COPIES], lse[FWD_MAX_COPIES];                 /* outputs per copy (0: none) */
    fg_fwd_args dev[FWD_MAX_COPIES]; /* the call's arguments on each complete copy */
} fwd_buffers;

/* Device bytes of one copy of p's tensors (Q, K, V, O and the LSE). */
static double fwd_copy_bytes(const problem *p) {
    double esz = (double)spec_dtype_size(p->dtype);
    double q = (double)p->batch * (double)p->seqlen_q * (double)p->heads * (double)p->head_dim;
    double kv = (double)p->batch * (double)p->seqlen_k * (double)p->heads_kv * (double)p->head_dim;
    return (2 * q + 2 * kv) * esz + (double)p->batch * (double)p->heads * (double)p->seqlen_q * 4.0;
}

/* Frees every buffer of B (device memory in the current context) and zeroes it. */
static void fwd_buffers_free(const fg_cuda_api *cu, fwd_buffers *B) {
    for (int c = 0; c < FWD_MAX_COPIES; c++) {
        CUdeviceptr *slots[5] = {&B->q[c], &B->k[c], &B->v[c], &B->o[c], &B->lse[c]};
        for (int i = 0; i < 5; i++)
            if (*slots[i]) cu->cuMemFree(*slots[i]);
    }
    free(B->hq);
    free(B->hk);
    free(B->hv);
    memset(B, 0, sizeof *B);
}

/* Fills poisoned outputs: all-ones bytes are NaN in fp16, bf16 and fp32, so any element the kernel
 * fails to write shows up. Waits for the memsets (they run on the legacy stream, which a non-blocking
 * stream does not wait for). Needs the context current. */
static fg_status fwd_poison(const fg_cuda_api *cu, const fwd_buffers *B, int copy, fg_error *err) {
    FG_CU(err, cu->cuMemsetD8(B->o[copy], 0xFF, B->nq * B->esz));
    FG_CU(err, cu->cuMemsetD8(B->lse[copy], 0xFF, B->nlse * sizeof(float)));
    FG_CU(err, cu->cuCtxSynchronize());
    return FG_OK;
}

/* Makes B (zeroed here first) hold problem p: host inputs filled from `seed` (Q, K and V from seed*3,
 * seed*3+1, seed*3+2) and up to `copies` device copies of every tensor (at least one), each uploaded,
 * its outputs poisoned. A copy after the first that does not fit in device memory is not made (check
 * B->ncopies); any other failure is an error. Needs the device's context current; on failure the
 * caller still calls fwd_buffers_free. */
static fg_status fwd_buffers_init(const fg_cuda_api *cu, const problem *p, uint64_t seed, int copies, fwd_buffers *B,
                                  fg_error *err) {
    memset(B, 0, sizeof *B);
    B->esz = (size_t)spec_dtype_size(p->dtype);
    B->nq = (size_t)(p->batch * p->seqlen_q * p->heads * p->head_dim);
    B->nkv = (size_t)(p->batch * p->seqlen_k * p->heads_kv * p->head_dim);
    B->nlse = (size_t)(p->batch * p->heads * p->seqlen_q);
    B->hq = malloc(B->nq * B->esz);
    B->hk = malloc(B->nkv * B->esz);
    B->hv = malloc(B->nkv * B->esz);
    if (!B->hq || !B->hk || !B->hv)
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for a problem of %zu + 2 x %zu elements", B->nq, B->nkv);
    problem_args(p, B->hq, B->hk, B->hv, NULL, NULL, &B->host);
    fg_status st;
    if ((st = ref_fill_normal(&B->host.q, seed * 3 + 0, err)) != FG_OK ||
        (st = ref_fill_normal(&B->host.k, seed * 3 + 1, err)) != FG_OK ||
        (st = ref_fill_normal(&B->host.v, seed * 3 + 2, err)) != FG_OK)
        return st;
    if (copies < 1) copies = 1;
    if (copies > FWD_MAX_COPIES) copies = FWD_MAX_COPIES;
    size_t sizes[5] = {B->nq * B->esz, B->nkv * B->esz, B->nkv * B->esz, B->nq * B->esz, B->nlse * sizeof(float)};
    for (int c = 0; c < copies; c++) {
        CUdeviceptr *slots[5] = {&B->q[c], &B->k[c], &B->v[c], &B->o[c], &B->lse[c]};
        CUresult rc = CUDA_SUCCESS;
        for (int i = 0; i < 5 && rc == CUDA_SUCCESS; i++) {
            rc = cu->cuMemAlloc(slots[i], sizes[i]);
            if (rc != CUDA_SUCCESS) *slots[i] = 0; /* never free what was not allocated */
        }
        if (rc == CUDA_ERROR_OUT_OF_MEMORY && c > 0) {
            /* Extra copies only keep the inputs out of L2; fewer of them still time correctly. */
            for (int i = 0; i < 5; i++)
                if (*slots[i]) {
                    cu->cuMemFree(*slots[i]);
                    *slots[i] = 0;
                }
            break;
        }
        if (rc != CUDA_SUCCESS)
            return cuda_api_fail(err, rc, "cuMemAlloc (Q, K, V, O and LSE of one copy of the problem)", __FILE__, __LINE__);
        FG_CU(err, cu->cuMemcpyHtoD(B->q[c], B->hq, sizes[0]));
        FG_CU(err, cu->cuMemcpyHtoD(B->k[c], B->hk, sizes[1]));
        FG_CU(err, cu->cuMemcpyHtoD(B->v[c], B->hv, sizes[2]));
        if ((st = fwd_poison(cu, B, c, err)) != FG_OK) return st;
        problem_args(p, (void *)(uintptr_t)B->q[c], (void *)(uintptr_t)B->k[c], (void *)(uintptr_t)B->v[c],
                     (void *)(uintptr_t)B->o[c], (void *)(uintptr_t)B->lse[c], &B->dev[c]);
        B->ncopies = c + 1;
    }
    return FG_OK;
}

/* Judges the output of copy `copy` of B (problem p) against the CPU reference, on a slice: batches
 * [0, nb), query heads [0, nh) and query rows [row0, seqlen_q). The last rows are the ones to keep:
 * with the bottom-right aligned causal mask they see the same keys in the slice as in the whole
 * problem, and they hold the partial last tile. nh must keep every head with its own K/V head under
 * the slice's GQA grouping (all heads, whole groups, or part of the first group). Copies O and LSE back (the
 * kernel must have finished: synchronize its stream first) and fills *rep. FG_ERR_CUDA naming the
 * copy that failed, FG_ERR_NO_MEMORY, FG_ERR_INTERNAL for a slice that breaks those rules. */
static fg_status fwd_check(const fg_cuda_api *cu, const fwd_buffers *B, const problem *p, int copy, int64_t nb,
                           int64_t nh, int64_t row0, ref_report *rep, fg_error *err) {
    int64_t sq = p->seqlen_q, hq = p->heads, d = p->head_dim, group = p->heads / p->heads_kv;
    int64_t rows = sq - row0, nkv = (nh + group - 1) / group;
    int keeps_groups = nh >= 1 && nh <= hq && nh % nkv == 0;
    for (int64_t h = 0; keeps_groups && h < nh; h++) keeps_groups = h / (nh / nkv) == h / group;
    if (nb < 1 || nb > p->batch || row0 < 0 || rows < 1 || !keeps_groups)
        return fg_fail(err, FG_ERR_INTERNAL, "check slice (batches %lld, heads %lld, rows from %lld) does not fit the "
                       "problem (a flashgen bug)", (long long)nb, (long long)nh, (long long)row0);
    size_t esz = B->esz, orow = (size_t)(hq * d) * esz; /* bytes of one query row of O, every head */
    uint8_t *ho = malloc((size_t)(nb * rows) * orow);
    float *hl = malloc((size_t)(nb * nh * sq) * sizeof(float));
    fg_status st = FG_OK;
    if (!ho || !hl) {
        st = fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for the output slice to check");
        goto done;
    }
    for (int64_t b = 0; b < nb; b++) {
        /* Rows row0.. of batch b are contiguous in O ([b, sq, hq, d]); heads 0..nh-1 of batch b are
         * contiguous in the LSE ([b, hq, sq]). */
        CUresult rc = cu->cuMemcpyDtoH(ho + (size_t)(b * rows) * orow, B->o[copy] + (size_t)(b * sq + row0) * orow,
                                       (size_t)rows * orow);
        if (rc == CUDA_SUCCESS)
            rc = cu->cuMemcpyDtoH(hl + b * nh * sq, B->lse[copy] + (size_t)(b * hq * sq) * sizeof(float),
                                  (size_t)(nh * sq) * sizeof(float));
        if (rc != CUDA_SUCCESS) {
            st = cuda_api_fail(err, rc, "cuMemcpyDtoH (the output to check)", __FILE__, __LINE__);
            goto done;
        }
    }
    fg_tensor q = B->host.q, k = B->host.k, v = B->host.v;
    q.data = (uint8_t *)q.data + (size_t)(row0 * q.stride[1]) * esz;
    q.shape[0] = nb, q.shape[1] = rows, q.shape[2] = nh;
    k.shape[0] = v.shape[0] = nb;
    k.shape[2] = v.shape[2] = nkv;
    fg_tensor out = q;
    out.data = ho;
    out.stride[0] = rows * hq * d;
    fg_tensor lse;
    memset(&lse, 0, sizeof lse);
    lse.data = hl + row0;
    lse.dtype = FG_DTYPE_F32;
    lse.ndim = 3;
    lse.shape[0] = nb, lse.shape[1] = nh, lse.shape[2] = rows;
    lse.stride[0] = nh * sq, lse.stride[1] = sq, lse.stride[2] = 1;
    ref_problem rp = {q, k, v, 0.f, p->causal};
    st = ref_check_fwd(&rp, &out, &lse, rep, err);
done:
    free(ho);
    free(hl);
    return st;
}

/* Launches the i-th launch of a timing (i counts warm-up launches too); fills err on failure. */
typedef fg_status (*launch_fn)(void *user, int i, fg_error *err);

/* What time_launches measured, in milliseconds per launch. */
typedef struct launch_times {
    double median;  /* the median interval */
    double min;     /* the fastest */
    double max;     /* the slowest */
} launch_times;

/* Compares floats for qsort. */
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Calls launch `warmup` times, then `iters` times (iters >= 1) with a CUDA event recorded on `stream`
 * before the first and after each one: each interval is one kernel, and the median of them is robust to
 * the odd slow launch (clock ramp, another process). Waits for the last event. Creates and destroys its
 * events. Returns launch's failure, FG_ERR_CUDA naming the event call, or FG_ERR_NO_MEMORY; the stream
 * may still hold work after a failure. */
static fg_status time_launches(const fg_cuda_api *cu, CUstream stream, int warmup, int iters, launch_fn launch,
                               void *user, launch_times *t, fg_error *err) {
    t->median = t->min = t->max = 0;
    CUevent *ev = calloc((size_t)iters + 1, sizeof *ev);
    float *ms = malloc((size_t)iters * sizeof *ms);
    int nev = 0;
    fg_status st = FG_OK;
    CUresult rc = CUDA_SUCCESS;
    const char *call = "";
    if (!ev || !ms) {
        st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for %d timing events", iters);
        goto done;
    }
    for (; nev <= iters; nev++)
        if ((rc = cu->cuEventCreate(&ev[nev], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
            call = "cuEventCreate";
            goto cuda_failed;
        }
    for (int i = 0; i < warmup; i++)
        if ((st = launch(user, i, err)) != FG_OK) goto done;
    if ((rc = cu->cuEventRecord(ev[0], stream)) != CUDA_SUCCESS) {
        call = "cuEventRecord";
        goto cuda_failed;
    }
    for (int i = 0; i < iters; i++) {
        if ((st = launch(user, warmup + i, err)) != FG_OK) goto done;
        if ((rc = cu->cuEventRecord(ev[i + 1], stream)) != CUDA_SUCCESS) {
            call = "cuEventRecord";
            goto cuda_failed;
        }
    }
    if ((rc = cu->cuEventSynchronize(ev[iters])) != CUDA_SUCCESS) {
        call = "cuEventSynchronize (waiting for the timed launches)";
        goto cuda_failed;
    }
    for (int i = 0; i < iters; i++)
        if ((rc = cu->cuEventElapsedTime(&ms[i], ev[i], ev[i + 1])) != CUDA_SUCCESS) {
            call = "cuEventElapsedTime";
            goto cuda_failed;
        }
    qsort(ms, (size_t)iters, sizeof *ms, cmp_float);
    t->median = iters % 2 ? ms[iters / 2] : 0.5 * ((double)ms[iters / 2 - 1] + (double)ms[iters / 2]);
    t->min = ms[0];
    t->max = ms[iters - 1];
    goto done;
cuda_failed:
    st = cuda_api_fail(err, rc, call, __FILE__, __LINE__);
done:
    for (int i = 0; i < nev; i++) cu->cuEventDestroy(ev[i]);
    free(ev);
    free(ms);
    return st;
}

/* The FLOPs of one forward pass by FlashAttention's convention: 4*b*h*sq*sk*d, half when causal. */
static double fwd_flops(const problem *p) {
    return 4.0 * (double)p->batch * (double)p->heads * (double)p->seqlen_q * (double)p->seqlen_k *
           (double)p->head_dim * (p->causal ? 0.5 : 1.0);
}

/* What `run` launches: the public entry point on one set of arguments. */
typedef struct run_launch {
    fg_context *ctx;          /* the context */
    const fg_fwd_args *args;  /* device arguments */
    CUstream stream;          /* where */
} run_launch;

/* launch_fn of `run`: fg_attention_fwd, its failure sentence into err. */
static fg_status run_launch_one(void *user, int i, fg_error *err) {
    run_launch *r = user;
    (void)i;
    if (fg_attention_fwd(r->ctx, r->args, r->stream) != FG_OK)
        return fg_fail(err, FG_ERR_INTERNAL, "fg_attention_fwd failed: %s", fg_last_error(r->ctx));
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

/* The body of `run` once the context exists: allocate, fill, launch, check, time. The CLI's own
 * allocations happen in the device's primary context (the one fg_context_create retained), pushed
 * here and popped at the end. Returns the exit status. */
static int run_gpu(fg_context *ctx, const fg_cuda_api *cu, const problem *p) {
    fg_error err;
    fg_error_clear(&err);
    fwd_buffers B;
    memset(&B, 0, sizeof B);
    int status = EXIT_FAIL, pushed = 0, retained = 0;
    CUdevice dev;
    CUcontext pctx = NULL, popped;
    CUstream stream = NULL;

    RUN_CU(cu->cuDeviceGet(&dev, (int)p->device));
    RUN_CU(cu->cuDevicePrimaryCtxRetain(&pctx, dev));
    retained = 1;
    RUN_CU(cu->cuCtxPushCurrent(pctx));
    pushed = 1;
    if (fwd_buffers_init(cu, p, (uint64_t)p->seed, 1, &B, &err) != FG_OK) goto fail;
    RUN_CU(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    char explain[4096];
    if (fg_explain(ctx, &B.dev[0], explain, sizeof explain) == FG_OK) printf("%s\n", explain);
    if (fg_attention_fwd(ctx, &B.dev[0], stream) != FG_OK) {
        fg_fail(&err, FG_ERR_INTERNAL, "fg_attention_fwd failed: %s", fg_last_error(ctx));
        goto fail;
    }
    RUN_CU(cu->cuStreamSynchronize(stream));

    ref_report rep;
    double c0 = now_seconds();
    if (fwd_check(cu, &B, p, 0, p->batch, p->heads, 0, &rep, &err) != FG_OK) goto fail;
    char line[1024];
    ref_report_format(&rep, line, sizeof line);
    printf("check: %s (CPU reference %.1f s): %s\n", rep.pass ? "PASS" : "FAIL", now_seconds() - c0, line);
    printf("max error %.3g, bound %.3g\n", rep.max_err, rep.bound);
    if (!rep.pass) {
        fg_fail(&err, FG_ERR_INTERNAL, "the output does not match the CPU reference (see the check line above)");
        goto fail;
    }

    int iters = (int)p->iters;
    run_launch rl = {ctx, &B.dev[0], stream};
    launch_times t;
    if (time_launches(cu, stream, 3, iters, run_launch_one, &rl, &t, &err) != FG_OK) goto fail;
    printf("time: median %.4f ms over %d launches (min %.4f, max %.4f), %.1f TFLOP/s\n", t.median, iters, t.min,
           t.max, t.median > 0 ? fwd_flops(p) / (t.median * 1e-3) / 1e12 : 0.0);
    status = EXIT_OK;
    goto cleanup;
fail:
    say("run", "%s", err.msg);
cleanup:
    if (pushed) cu->cuCtxSynchronize(); /* nothing may still use the buffers freed below */
    if (stream) cu->cuStreamDestroy(stream);
    fwd_buffers_free(cu, &B);
    if (pushed) cu->cuCtxPopCurrent(&popped);
    if (retained) cu->cuDevicePrimaryCtxRelease(dev);
    return status;
}

/* `flashgen run [problem options] [--iters N] [--seed S]`. */
static int cmd_run(int argc, char **argv) {
    problem p;
    int rc = parse_problem("run", argc, argv, 1, &p);
    if (rc >= 0) return rc;
    fg_context *ctx = open_context("run", (int)p.device, FG_LOG_INFO, NULL);
    if (!ctx) return EXIT_FAIL;
    fg_error err;
    fg_error_clear(&err);
    const fg_cuda_api *cu = cuda_api_get(&err); /* loaded already: open_context succeeded */
    printf("problem: %s, batch %lld, seqlen_q %lld, seqlen_k %lld, heads %lld, heads_kv %lld, head_dim %lld%s\n",
           spec_dtype_name(p.dtype), p.batch, p.seqlen_q, p.seqlen_k, p.heads, p.heads_kv, p.head_dim,
           p.causal ? ", causal" : "");
    fflush(stdout);
    int status = cu ? run_gpu(ctx, cu, &p) : EXIT_FAIL;
    if (!cu) say("run", "no CUDA device: %s", err.msg);
    fg_context_destroy(ctx);
    return status;
}

/* ------------------------------------------------------------------ tune */

/* What the sweep does with one (problem, candidate) pair. */
typedef enum tune_action {
    TUNE_SKIP = 0,   /* the database already records it: a resumed sweep does not repeat it */
    TUNE_REFUSE = 1, /* validation or the device's shared memory refuses it: recorded as refused */
    TUNE_TIME = 2    /* compiled, checked and timed */
} tune_action;

/* Compile states of a TUNE_TIME item (changed under the pool's lock). */
enum { TUNE_QUEUED = 0, TUNE_COMPILING = 1, TUNE_COMPILED = 2 };

/* How a problem (or the whole sweep) ended. */
enum { TUNE_GO_ON = 0, TUNE_STOPPED = 1, TUNE_FATAL = 2 };

/* One (problem, candidate) pair of the sweep. */
typedef struct tune_item {
    int problem;                 /* index in the space */
    int cand;                    /* index in the problem's candidates */
    tune_action action;          /* what the sweep does with it */
    int compile_of;              /* TUNE_TIME: the item whose compile serves it (itself, or the first item
                                    of the same spec: spaces repeat specs across problem sizes) */
    int state;                   /* TUNE_QUEUED, TUNE_COMPILING or TUNE_COMPILED (pool lock) */
    fg_tune_status compiled;     /* once compiled: FG_TUNE_OK, FG_TUNE_FAILED or FG_TUNE_SPILLED */
    char note[FG_TUNE_NOTE_MAX]; /* the refusal, the compile failure, the spill figures or the registers */
} tune_item;

/* The compile workers' queue: the TUNE_TIME items that compile a spec first, in sweep order, so the
 * candidate the GPU needs next is always compiled (or being compiled) before any later one. */
typedef struct tune_pool {
    const fg_tune_space *space;  /* the specs (read only while the workers run) */
    tune_item *items;            /* every item of the sweep */
    int *queue;                  /* indexes of the items to compile, in sweep order */
    int nqueue;                  /* their number */
    int next;                    /* the next queue entry to take (lock) */
    int stop;                    /* 1: take no more (lock) */
    const fg_disk_cache *disk;   /* where compiled cubins go for the runtime to load, or NULL */
    pthread_mutex_t lock;        /* guards next, stop and the items' state, compiled and note */
    pthread_cond_t compiled;     /* broadcast whenever an item is compiled */
} tune_pool;

/* The options of a sweep. */
typedef struct tune_opts {
    int device;      /* CUDA ordinal */
    double budget;   /* seconds after which no candidate starts; 0: none */
    int jobs;        /* compile threads; 0: the online CPUs */
    int iters;       /* timed launches per candidate */
    const char *db;  /* the database file, or NULL for this GPU's default */
} tune_opts;

/* A sweep in progress. */
typedef struct tune_run {
    const char *space_path;          /* SPACE as given */
    const fg_tune_space *space;      /* its problems and candidates, for this GPU's arch */
    fg_context *ctx;                 /* candidates launch through it (rt_fwd_with_spec) */
    const fg_cuda_api *cu;           /* driver entry points */
    fg_tunedb *db;                   /* the database being filled */
    const char *db_path;             /* where it is saved */
    tune_item *items;                /* every (problem, candidate) pair, problem-major */
    const tune_opts *opt;            /* iterations and budget */
    double l2_bytes;                 /* the device's L2 cache, which timed inputs must not sit in */
    CUstream stream;                 /* every launch of the sweep goes here */
    double t0;                       /* when the sweep started (now_seconds) */
    int planned, done;                  /* items to record in this run / recorded so far */
    int work_planned, work_done;        /* of those, compiled ones: they take the time, so they drive the ETA */
    int added[FG_TUNE_STATUS_COUNT]; /* records added in this run, by status */
    int dirty;                       /* records were added since the last save */
    int budget_hit;                  /* the sweep stopped because the budget ran out */
    int tty;                         /* stderr is a terminal: one updating progress line */
    int line_open;                   /* that line is on screen without its newline */
    double best_ms;                  /* the current problem's fastest ok time; 0 until there is one */
    fg_spec best;                    /* its variant */
} tune_run;

/* The current problem's GPU side. */
typedef struct tune_gpu {
    problem p;                /* the shape it is timed at */
    fwd_buffers B;            /* inputs and outputs, allocated at its first candidate that runs */
    int ready;                /* B is allocated */
    int64_t check_heads;      /* query heads of batch 0 the check covers */
    int64_t check_row0;       /* first query row it covers (it covers check_row0 .. seqlen_q - 1) */
    char l2note[128];         /* how the inputs stand to L2, for the notes; "" when they are far larger */
} tune_gpu;

/* The signal that asked the sweep to stop, or 0. Set by the handler, read between candidates. */
static volatile sig_atomic_t tune_signal;

/* SIGINT/SIGTERM handler during a sweep: asks it to stop after the current candidate. Installed with
 * SA_RESETHAND, so a second signal takes the default action (the database is saved after every
 * problem and written atomically, so even that loses at most one problem's candidates). */
static void tune_on_signal(int sig) { tune_signal = sig; }

/* Prints one line on stderr after ending the progress line, so it never lands in the middle of one.
 * prefix: "flashgen tune: " for errors and warnings, "tune: " for information. */
static void tune_print(tune_run *R, const char *prefix, const char *fmt, ...) FG_PRINTF(3, 4);
static void tune_print(tune_run *R, const char *prefix, const char *fmt, ...) {
    if (R && R->line_open) {
        fputc('\n', stderr);
        R->line_open = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    fputs(prefix, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
#define TUNE_ERR "flashgen tune: "
#define TUNE_INFO "tune: "

/* snprintf for record notes, which are summaries: cutting one at FG_TUNE_NOTE_MAX bytes is intended
 * (the database would cut it anyway), so this says so once instead of at every call. */
static void tune_note(char *buf, size_t n, const char *fmt, ...) FG_PRINTF(3, 4);
static void tune_note(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* "d128 bf16 causal gqa 4 sq 2048 sk 2048 bh 128": a problem, short. */
static void tune_problem_text(const fg_tune_problem *pb, char *buf, size_t n) {
    char gqa[32] = "";
    if (pb->cls.gqa > 1) snprintf(gqa, sizeof gqa, " gqa %d", pb->cls.gqa);
    snprintf(buf, n, "d%d %s%s%s sq %d sk %d bh %d", pb->cls.head_dim, spec_dtype_name(pb->cls.dtype),
             pb->cls.causal ? " causal" : "", gqa, pb->seqlen_q, pb->seqlen_k, pb->batch_heads);
}

/* "128x64 w4 s2": a candidate's tiles (block_m x block_n, warps, stages). */
static void tune_tiles_text(const fg_spec *s, char *buf, size_t n) {
    snprintf(buf, n, "%dx%d w%d s%d", s->block_m, s->block_n, s->warps, s->stages);
}

/* Shows progress after a record: "[done/total] problem: tiles outcome | best <ms> <tiles> | eta <s>",
 * rewriting one line on a terminal, else one line per candidate (logs keep every outcome). */
static void tune_progress(tune_run *R, const fg_tune_problem *pb, const fg_spec *spec, fg_tune_status st, double ms) {
    char what[128], tiles[48], best[96], eta[32], line[400];
    tune_problem_text(pb, what, sizeof what);
    tune_tiles_text(spec, tiles, sizeof tiles);
    char outcome[48];
    if (st == FG_TUNE_OK) snprintf(outcome, sizeof outcome, "ok %.4f ms", ms);
    else snprintf(outcome, sizeof outcome, "%s", tunedb_status_name(st));
    if (R->best_ms > 0) {
        char bt[48];
        tune_tiles_text(&R->best, bt, sizeof bt);
        snprintf(best, sizeof best, "%.4f ms %s", R->best_ms, bt);
    } else {
        snprintf(best, sizeof best, "-");
    }
    double elapsed = now_seconds() - R->t0;
    if (R->work_done >= R->work_planned) snprintf(eta, sizeof eta, "0 s");
    else if (R->work_done == 0) snprintf(eta, sizeof eta, "?");
    else snprintf(eta, sizeof eta, "%.0f s", elapsed / R->work_done * (R->work_planned - R->work_done));
    int width = 1;
    for (int n = R->planned; n >= 10; n /= 10) width++;
    snprintf(line, sizeof line, "[%*d/%d] %s: %s %s | best %s | eta %s", width, R->done, R->planned, what, tiles, outcome,
             best, eta);
    if (R->tty) {
        /* A line longer than the terminal wraps, and '\r' would then rewrite only its last row. */
        struct winsize ws;
        int cols = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 ? ws.ws_col - 1 : 119;
        fprintf(stderr, "\r%.*s\033[K", cols, line);
        R->line_open = 1;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

/* Adds one result to the database and shows it; `work`: the candidate was compiled (it counts for the
 * ETA). Returns 0, or -1 after printing why the database refused the record (a flashgen bug). */
static int tune_record(tune_run *R, const fg_tune_problem *pb, const fg_spec *spec, fg_tune_status st, double ms,
                       double tflops, const char *note, int work) {
    fg_tune_record rec;
    memset(&rec, 0, sizeof rec);
    rec.cls = pb->cls;
    rec.spec = *spec;
    rec.status = st;
    rec.ms = ms;
    rec.tflops = tflops;
    tune_note(rec.note, sizeof rec.note, "%s", note);
    fg_error err;
    fg_error_clear(&err);
    if (tunedb_add(R->db, &rec, &err) != FG_OK) {
        tune_print(R, TUNE_ERR, "cannot record a result: %s", err.msg);
        return -1;
    }
    R->added[st]++;
    R->done++;
    R->work_done += work;
    R->dirty = 1;
    if (st == FG_TUNE_OK && (R->best_ms <= 0 || ms < R->best_ms)) {
        R->best_ms = ms;
        R->best = *spec;
    }
    tune_progress(R, pb, spec, st, ms);
    return 0;
}

/* Saves the database when records were added since the last save. Returns 0, or -1 after printing why. */
static int tune_save(tune_run *R) {
    if (!R->dirty) return 0;
    fg_error err;
    fg_error_clear(&err);
    if (tunedb_save(R->db_path, R->db, &err) != FG_OK) {
        tune_print(R, TUNE_ERR, "%s", err.msg);
        return -1;
    }
    R->dirty = 0;
    return 0;
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
    p->batch = bh / h;
    p->seqlen_q = pb->seqlen_q;
    p->seqlen_k = pb->seqlen_k;
    p->heads = h;
    p->heads_kv = h / g;
    p->head_dim = d;
    p->causal = pb->cls.causal != 0;
    return 0;
}

/* Checks, before any GPU work, that every problem of the space can be laid out and called (grid limits,
 * sizes). Returns 0, or 1 after printing "SPACE:line: ..." for the first that cannot. */
static int tune_check_shapes(const char *space_path, const fg_tune_space *sp) {
    for (int i = 0; i < sp->count; i++) {
        const fg_tune_problem *pb = &sp->problems[i];
        problem p;
        if (tune_shape(pb, &p) != 0) {
            say("tune", "%s:%d: batch_heads %d is not a positive multiple of gqa %d", space_path, pb->line,
                pb->batch_heads, pb->cls.gqa);
            return 1;
        }
        fg_fwd_args a;
        problem_args(&p, NULL, NULL, NULL, NULL, NULL, &a);
        fg_error err;
        fg_error_clear(&err);
        if (rt_check_fwd_args(&a, 0, &err) != FG_OK) {
            say("tune", "%s:%d: the problem (batch %lld x heads %lld, seqlen_q %lld, seqlen_k %lld, head_dim %lld) "
                "cannot be run: %s", space_path, pb->line, p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim, err.msg);
            return 1;
        }
    }
    return 0;
}

/* The identity of the database for ctx's GPU and this build. FG_ERR_CUDA when the driver version
 * cannot be read. */
static fg_status tune_identity(const fg_context *ctx, fg_tune_identity *id, fg_error *err) {
    int driver = 0;
    FG_CU(err, ctx->cu->cuDriverGetVersion(&driver));
    tunedb_identity_init(id, ctx->device_name, ctx->arch, ctx->sm_count, driver, compile_nvrtc_version());
    return FG_OK;
}

/* Renames path to "<path>.bad-YYYYMMDD-HHMMSS" (adding "-2", "-3", ... when that exists: nothing is
 * ever overwritten) and writes the new name into moved (n bytes). Returns 0, or -1 with errno set. */
static int tune_move_aside(const char *path, char *moved, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32] = "unknown-time";
    if (localtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int i = 1; i <= 100; i++) {
        int w = i == 1 ? snprintf(moved, n, "%s.bad-%s", path, stamp) : snprintf(moved, n, "%s.bad-%s-%d", path, stamp, i);
        if (w < 0 || (size_t)w >= n) {
            errno = ENAMETOOLONG;
            return -1;
        }
        struct stat st;
        if (lstat(moved, &st) == 0) continue;
        if (errno != ENOENT) return -1;
        return rename(path, moved) == 0 ? 0 : -1;
    }
    errno = EEXIST;
    return -1;
}

/* Loads the database at path for identity id into *db: a missing file gives a new database; a file for
 * another GPU or version, or a corrupt one, is moved aside (said, with why) and a new one begun. Returns
 * 0, or -1 after printing why it can do neither (an unreadable file, one it cannot move). */
static int tune_open_db(const char *path, const fg_tune_identity *id, fg_tunedb *db) {
    fg_error err;
    fg_error_clear(&err);
    fg_status st = tunedb_load(path, id, db, &err);
    if (st == FG_OK) return 0;
    tunedb_free(db);
    tunedb_init(db, id);
    if (st == FG_ERR_NOT_FOUND) return 0;
    if (st != FG_ERR_FORMAT) {
        say("tune", "%s", err.msg);
        return -1;
    }
    char moved[PATH_MAX + 64];
    if (tune_move_aside(path, moved, sizeof moved) != 0) {
        say("tune", "%s; it could not be moved aside (%s), and it is not overwritten: move or remove it, or give "
            "another --db FILE", err.msg, strerror(errno));
        return -1;
    }
    say("tune", "%s; moved it aside to %s and starting a new database", err.msg, moved);
    return 0;
}

/* Compiles spec with NVRTC and reads its ptxas report. A cubin that does not spill is stored in `disk`
 * (when not NULL) under the key the runtime computes for the same spec, so rt_fwd_with_spec loads it
 * instead of compiling again; a failed store costs only that second compile. Sets *status (ok, failed,
 * spilled) and note (the failure sentence, the spill figures or the register count). */
static void tune_compile(const fg_spec *spec, const fg_disk_cache *disk, fg_tune_status *status, char *note, size_t n) {
    fg_error err;
    fg_error_clear(&err);
    char *src = NULL;
    size_t len = 0;
    fg_compile_result r;
    memset(&r, 0, sizeof r);
    if (emit_source(spec, &src, &len, &err) != FG_OK || compile_source(spec, src, len, 0, &r, &err) != FG_OK) {
        *status = FG_TUNE_FAILED;
        tune_note(note, n, "%s", err.msg);
    } else if (r.spill_stores > 0) {
        *status = FG_TUNE_SPILLED;
        tune_note(note, n, "spills %d bytes of stores and %d of loads to local memory (%d registers)", r.spill_stores,
                 r.spill_loads, r.registers);
    } else {
        *status = FG_TUNE_OK;
        tune_note(note, n, "%d registers", r.registers);
        if (disk) {
            uint8_t key[32];
            char name[FG_SPEC_NAME_MAX];
            fg_error werr;
            compile_cache_key(spec, src, len, key);
            if (spec_format(spec, name, sizeof name) > 0) (void)cache_put(disk, key, name, r.cubin, r.cubin_size, &werr);
        }
    }
    compile_result_free(&r);
    free(src);
}

/* Compile worker: takes queued items in order until the queue is empty or the sweep stops. */
static void *tune_worker(void *arg) {
    tune_pool *pool = arg;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        int i = !pool->stop && pool->next < pool->nqueue ? pool->queue[pool->next++] : -1;
        if (i >= 0) pool->items[i].state = TUNE_COMPILING;
        pthread_mutex_unlock(&pool->lock);
        if (i < 0) return NULL;
        tune_item *it = &pool->items[i]; /* problem and cand never change while workers run */
        fg_tune_status status;
        char note[FG_TUNE_NOTE_MAX];
        tune_compile(&pool->space->problems[it->problem].cands[it->cand].spec, pool->disk, &status, note, sizeof note);
        pthread_mutex_lock(&pool->lock);
        it->compiled = status;
        memcpy(it->note, note, sizeof note);
        it->state = TUNE_COMPILED;
        pthread_cond_broadcast(&pool->compiled);
        pthread_mutex_unlock(&pool->lock);
    }
}

/* Waits until the compile that serves `it` is done and returns that item (its compiled and note are then
 * final), or NULL when a signal asked the sweep to stop first. */
static const tune_item *tune_wait_compiled(tune_pool *pool, const tune_item *item) {
    const tune_item *it = &pool->items[item->compile_of];
    pthread_mutex_lock(&pool->lock);
    while (it->state != TUNE_COMPILED && !tune_signal) {
        /* A signal does not end a condition wait: look at the flag every 100 ms. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100L * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&pool->compiled, &pool->lock, &until);
    }
    int done = it->state == TUNE_COMPILED;
    pthread_mutex_unlock(&pool->lock);
    return done ? it : NULL;
}

/* Allocates and fills the current problem's tensors, at its first candidate that runs. One copy when
 * a copy is at least the L2 size; else enough copies (up to FWD_MAX_COPIES) that between two uses of
 * one copy the others have passed a whole L2 through the cache. Returns 0, or -1 after printing why. */
static int tune_gpu_prepare(tune_run *R, tune_gpu *G, int pi) {
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
        tune_print(R, TUNE_ERR, "%s:%d: cannot set up the problem's tensors (%.1f MiB per copy): %s", R->space_path,
                   pb->line, copy / mib, err.msg);
        return -1;
    }
    G->ready = 1;
    int n = G->B.ncopies;
    if (copy >= R->l2_bytes) G->l2note[0] = '\0';
    else if ((n - 1) * copy >= R->l2_bytes) snprintf(G->l2note, sizeof G->l2note, "inputs rotated over %d copies", n);
    else
        snprintf(G->l2note, sizeof G->l2note, "inputs (%.1f MiB, %d cop%s) fit in L2: times may be optimistic",
                 copy / mib, n, n == 1 ? "y" : "ies");
    tune_print(R, TUNE_INFO, "timing at batch %lld x heads %lld (heads_kv %lld): %.1f MiB of tensors%s%s", G->p.batch,
               G->p.heads, G->p.heads_kv, copy / mib, G->l2note[0] ? "; " : "", G->l2note);
    return 0;
}

/* What the timing launches: one candidate, rotating over the problem's copies. */
typedef struct tune_launch {
    fg_context *ctx;         /* the context */
    const fg_spec *spec;     /* the candidate */
    const fwd_buffers *B;    /* the copies */
    CUstream stream;         /* where */
} tune_launch;

/* launch_fn of `tune`: the candidate on copy i mod ncopies. */
static fg_status tune_launch_one(void *user, int i, fg_error *err) {
    const tune_launch *t = user;
    return rt_fwd_with_spec(t->ctx, t->spec, &t->B->dev[i % t->B->ncopies], t->stream, err);
}

/* Runs candidate spec on the current problem: one launch on poisoned outputs, the check of its slice,
 * then the timing. Fills *st (ok or wrong), *ms, *tflops and note (compile_note is the compile's).
 * Returns FG_OK, or the failure of a launch or a driver call: the candidate is then recorded as failed
 * and the caller looks whether the context survived. */
static fg_status tune_measure(tune_run *R, tune_gpu *G, const fg_spec *spec, const char *compile_note,
                              fg_tune_status *st, double *ms, double *tflops, char *note, size_t n, fg_error *err) {
    const fg_cuda_api *cu = R->cu;
    fg_status s;
    *st = FG_TUNE_FAILED;
    *ms = *tflops = 0;
    if ((s = fwd_poison(cu, &G->B, 0, err)) != FG_OK) return s;
    if ((s = rt_fwd_with_spec(R->ctx, spec, &G->B.dev[0], R->stream, err)) != FG_OK) return s;
    FG_CU(err, cu->cuStreamSynchronize(R->stream));
    ref_report rep;
    if ((s = fwd_check(cu, &G->B, &G->p, 0, 1, G->check_heads, G->check_row0, &rep, err)) != FG_OK) return s;
    if (!rep.pass) {
        char line[1024];
        ref_report_format(&rep, line, sizeof line);
        *st = FG_TUNE_WRONG;
        tune_note(note, n, "check of batch 0, heads 0-%lld, rows %lld-%lld: %.900s", (long long)G->check_heads - 1,
                 (long long)G->check_row0, G->p.seqlen_q - 1, line);
        return FG_OK;
    }
    tune_launch tl = {R->ctx, spec, &G->B, R->stream};
    launch_times t;
    if ((s = time_launches(cu, R->stream, 3, R->opt->iters, tune_launch_one, &tl, &t, err)) != FG_OK) return s;
    if (!(t.median > 0))
        return fg_fail(err, FG_ERR_CUDA, "the CUDA events measured no time (median %g ms)", t.median);
    *st = FG_TUNE_OK;
    *ms = t.median;
    *tflops = fwd_flops(&G->p) / (t.median * 1e-3) / 1e12;
    tune_note(note, n, "max err %.3g (bound %.3g); %s%s%s", rep.max_err, rep.bound, compile_note,
             G->l2note[0] ? "; " : "", G->l2note);
    return FG_OK;
}

/* Runs the items [first, end) of problem pi: records the refused ones, waits for each compile, then
 * records the outcome of each candidate that compiled. Stops before a candidate once a signal came or
 * the budget ran out (TUNE_STOPPED; R->budget_hit tells which). Returns TUNE_GO_ON, TUNE_STOPPED or
 * TUNE_FATAL (printed). */
static int tune_problem(tune_run *R, tune_pool *pool, int pi, int first, int end) {
    const fg_tune_problem *pb = &R->space->problems[pi];
    tune_gpu G;
    memset(&G, 0, sizeof G);
    tune_shape(pb, &G.p); /* checked by tune_check_shapes */
    /* The check covers batch 0, two heads and the last rows up to about 2^28 multiply-adds per reference,
     * a fraction of a second on the CPU whatever the problem's size. */
    G.check_heads = G.p.heads < 2 ? G.p.heads : 2;
    int64_t rows = ((int64_t)1 << 28) / (G.check_heads * G.p.seqlen_k * G.p.head_dim);
    if (rows < 64) rows = 64;
    if (rows > G.p.seqlen_q) rows = G.p.seqlen_q;
    G.check_row0 = G.p.seqlen_q - rows;

    int pending = 0, refused = 0;
    for (int i = first; i < end; i++) {
        pending += R->items[i].action != TUNE_SKIP;
        refused += R->items[i].action == TUNE_REFUSE;
    }
    if (pending == 0) return TUNE_GO_ON;
    R->best_ms = 0;
    for (int i = 0; i < R->db->count; i++) { /* a resumed problem's best so far */
        const fg_tune_record *r = &R->db->records[i];
        if (r->status == FG_TUNE_OK && r->cls.kind == pb->cls.kind && r->cls.dtype == pb->cls.dtype &&
            r->cls.head_dim == pb->cls.head_dim && r->cls.causal == (pb->cls.causal != 0) && r->cls.gqa == pb->cls.gqa &&
            r->cls.seqlen_q == pb->cls.seqlen_q && r->cls.seqlen_k == pb->cls.seqlen_k &&
            r->cls.batch_heads == pb->cls.batch_heads && (R->best_ms <= 0 || r->ms < R->best_ms)) {
            R->best_ms = r->ms;
            R->best = r->spec;
        }
    }
    char what[128];
    tune_problem_text(pb, what, sizeof what);
    tune_print(R, TUNE_INFO, "problem %d/%d (%s:%d): %s: %d candidates to record (%d refused), %d already measured",
               pi + 1, R->space->count, R->space_path, pb->line, what, pending, refused, pb->ncands - pending);

    int result = TUNE_GO_ON;
    for (int i = first; i < end && result == TUNE_GO_ON; i++) {
        tune_item *it = &R->items[i];
        if (it->action == TUNE_SKIP) continue;
        if (tune_signal) {
            result = TUNE_STOPPED;
            break;
        }
        if (R->opt->budget > 0 && now_seconds() - R->t0 >= R->opt->budget) {
            R->budget_hit = 1;
            result = TUNE_STOPPED;
            break;
        }
        const fg_spec *spec = &pb->cands[it->cand].spec;
        if (it->action == TUNE_REFUSE) {
            if (tune_record(R, pb, spec, FG_TUNE_REFUSED, 0, 0, it->note, 0) != 0) result = TUNE_FATAL;
            continue;
        }
        const tune_item *built = tune_wait_compiled(pool, it);
        if (!built) {
            result = TUNE_STOPPED;
            break;
        }
        /* The worker wrote compiled and note before the lock tune_wait_compiled took; they stay so. */
        if (built->compiled != FG_TUNE_OK) {
            if (tune_record(R, pb, spec, built->compiled, 0, 0, built->note, 1) != 0) result = TUNE_FATAL;
            continue;
        }
        if (!G.ready && tune_gpu_prepare(R, &G, pi) != 0) {
            result = TUNE_FATAL;
            break;
        }
        fg_tune_status st;
        double ms, tflops;
        char note[FG_TUNE_NOTE_MAX];
        fg_error err;
        fg_error_clear(&err);
        if (tune_measure(R, &G, spec, built->note, &st, &ms, &tflops, note, sizeof note, &err) == FG_OK) {
            if (tune_record(R, pb, spec, st, ms, tflops, note, 1) != 0) result = TUNE_FATAL;
            continue;
        }
        /* A launch the driver refuses (resources) leaves the context usable; a kernel that faulted
         * poisons it for the rest of the process, and every later candidate would fail too. */
        int alive = R->cu->cuCtxSynchronize() == CUDA_SUCCESS;
        if (tune_record(R, pb, spec, FG_TUNE_FAILED, 0, 0, err.msg, 1) != 0) {
            result = TUNE_FATAL;
        } else if (!alive) {
            char tiles[48];
            tune_tiles_text(spec, tiles, sizeof tiles);
            tune_print(R, TUNE_ERR, "the CUDA context is unusable after candidate %s of problem %d failed (%s); it is "
                       "recorded as failed, so running the same command again goes on after it", tiles, pi + 1, err.msg);
            result = TUNE_FATAL;
        }
    }
    if (G.ready) {
        R->cu->cuCtxSynchronize(); /* nothing may still use the buffers freed below */
        fwd_buffers_free(R->cu, &G.B);
    }
    return result;
}

/* Prints the records of the space's problem classes as `--show` does. Returns 0, or -1 after printing why. */
static int tune_print_table(tune_run *R) {
    fg_tunedb sub;
    tunedb_init(&sub, &R->db->id);
    fg_error err;
    fg_error_clear(&err);
    int rc = 0;
    for (int i = 0; i < R->db->count && rc == 0; i++) {
        const fg_tune_record *r = &R->db->records[i];
        for (int k = 0; k < R->space->count; k++) {
            const fg_tune_class *c = &R->space->problems[k].cls;
            if (r->cls.kind == c->kind && r->cls.dtype == c->dtype && r->cls.head_dim == c->head_dim &&
                r->cls.causal == (c->causal != 0) && r->cls.gqa == c->gqa && r->cls.seqlen_q == c->seqlen_q &&
                r->cls.seqlen_k == c->seqlen_k && r->cls.batch_heads == c->batch_heads) {
                if (tunedb_add(&sub, r, &err) != FG_OK) rc = -1;
                break;
            }
        }
    }
    if (rc == 0 && tunedb_format_table(&sub, stdout, &err) != FG_OK) rc = -1;
    if (rc != 0) tune_print(R, TUNE_ERR, "%s", err.msg);
    tunedb_free(&sub);
    return rc;
}

/* Orders item indexes by spec name, then index (qsort context through a file-scope pointer: the sweep
 * plans once, on one thread). */
static const char *tune_sort_names;
static int tune_cmp_name(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(tune_sort_names + (size_t)x * FG_SPEC_NAME_MAX, tune_sort_names + (size_t)y * FG_SPEC_NAME_MAX);
    return c ? c : (x > y) - (x < y);
}

/* Points every TUNE_TIME item at the first TUNE_TIME item with the same spec (compile_of), so each
 * variant is compiled once however many problems try it. Returns 0, or -1 when memory runs out (the
 * items are then unchanged). */
static int tune_share_compiles(const fg_tune_space *sp, tune_item *items, int n) {
    char *names = malloc((size_t)(n > 0 ? n : 1) * FG_SPEC_NAME_MAX);
    int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!names || !order) {
        free(names);
        free(order);
        return -1;
    }
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (items[k].action != TUNE_TIME) continue;
        char *name = names + (size_t)k * FG_SPEC_NAME_MAX;
        if (spec_format(&sp->problems[items[k].problem].cands[items[k].cand].spec, name, FG_SPEC_NAME_MAX) < 0)
            continue; /* unformattable: it keeps its own compile, which then fails with the reason */
        order[m++] = k;
    }
    tune_sort_names = names;
    if (m > 1) qsort(order, (size_t)m, sizeof *order, tune_cmp_name);
    for (int i = 1; i < m; i++)
        if (strcmp(names + (size_t)order[i] * FG_SPEC_NAME_MAX, names + (size_t)order[i - 1] * FG_SPEC_NAME_MAX) == 0)
            items[order[i]].compile_of = items[order[i - 1]].compile_of;
    tune_sort_names = NULL;
    free(names);
    free(order);
    return 0;
}

/* Decides what the sweep does with each of the n (problem, candidate) pairs of sp, in order, into items:
 * skip what db records already, refuse what validation or the device's shared memory refuses (the note
 * says why), time the rest, each compiled once per spec. Counts into *skipped and *refused. Returns 0,
 * or -1 when memory runs out. */
static int tune_plan(const fg_tune_space *sp, const fg_tunedb *db, const fg_context *ctx, tune_item *items, int n,
                     int *skipped, int *refused) {
    *skipped = *refused = 0;
    for (int i = 0, k = 0; i < sp->count && k < n; i++) {
        const fg_tune_problem *pb = &sp->problems[i];
        for (int j = 0; j < pb->ncands && k < n; j++, k++) {
            const fg_tune_candidate *c = &pb->cands[j];
            tune_item *it = &items[k];
            it->problem = i;
            it->cand = j;
            if (tunedb_has(db, &pb->cls, &c->spec)) {
                it->action = TUNE_SKIP;
                ++*skipped;
            } else if (c->status != FG_OK) {
                it->action = TUNE_REFUSE;
                tune_note(it->note, sizeof it->note, "%s", c->why);
            } else if (spec_smem_bytes(&c->spec) > ctx->smem_optin) {
                it->action = TUNE_REFUSE;
                tune_note(it->note, sizeof it->note, "needs %zu bytes of shared memory per block; %s allows %zu",
                          spec_smem_bytes(&c->spec), ctx->device_name, ctx->smem_optin);
            } else {
                it->action = TUNE_TIME;
                it->compile_of = k;
            }
            *refused += it->action == TUNE_REFUSE;
        }
    }
    return tune_share_compiles(sp, items, n);
}

/* Says how the sweep ended and, unless it was interrupted or failed, prints the table of this space's
 * problems. Returns the exit status: 0 when it ran to the end or to the budget, else 1. */
static int tune_finish(tune_run *R, int outcome) {
    if (R->line_open) {
        fputc('\n', stderr);
        R->line_open = 0;
    }
    int n = R->done;
    const char *s = n == 1 ? "" : "s";
    if (outcome == TUNE_FATAL) {
        if (R->dirty) say("tune", "stopped; the %d candidate%s measured could not be saved", n, s);
        else if (n == 0) say("tune", "stopped before any candidate was recorded");
        else say("tune", "stopped; %d candidate%s measured and saved in %s; run the same command to resume", n, s,
                 R->db_path);
        return EXIT_FAIL;
    }
    if (outcome == TUNE_STOPPED && !R->budget_hit) {
        say("tune", "interrupted; %d candidate%s measured, resume with the same command", n, s);
        return EXIT_FAIL;
    }
    if (R->budget_hit)
        tune_print(R, TUNE_INFO, "budget of %.0f s reached: %d of %d candidates left; run the same command to resume",
                   R->opt->budget, R->planned - n, R->planned);
    tune_print(R, TUNE_INFO, "%d candidate%s recorded in %.0f s (%d ok, %d wrong, %d failed, %d spilled, %d refused); "
               "database %s", n, s, now_seconds() - R->t0, R->added[FG_TUNE_OK], R->added[FG_TUNE_WRONG],
               R->added[FG_TUNE_FAILED], R->added[FG_TUNE_SPILLED], R->added[FG_TUNE_REFUSED], R->db_path);
    return tune_print_table(R) == 0 ? EXIT_OK : EXIT_FAIL;
}

/* `flashgen tune SPACE`: the sweep. Returns the exit status. */
static int tune_sweep(const char *space_path, const tune_opts *o) {
    fg_error err;
    fg_error_clear(&err);
    fg_tune_space space;
    memset(&space, 0, sizeof space);
    fg_tunedb db;
    memset(&db, 0, sizeof db);
    tune_pool pool;
    memset(&pool, 0, sizeof pool);
    tune_run R;
    memset(&R, 0, sizeof R);
    pthread_t *threads = NULL;
    int nthreads = 0, pool_init = 0, pushed = 0, retained = 0, handlers = 0, status = EXIT_FAIL;
    fg_context *ctx = NULL;
    const fg_cuda_api *cu = NULL;
    CUcontext pctx = NULL, popped;
    struct sigaction old_int, old_term;

    /* The space first, for an arch every GPU-less machine can validate: a bad file is reported even
     * without a GPU. It is loaded again below for the GPU's own arch when that differs. */
    if (space_load(space_path, 90, 1, &space, &err) != FG_OK) {
        say("tune", "%s", err.msg);
        return EXIT_FAIL;
    }
    if (tune_check_shapes(space_path, &space) != 0) goto done;
    ctx = open_context("tune", o->device, FG_LOG_WARN, ""); /* "": the sweep must not trust the file it rewrites */
    if (!ctx) goto done;
    cu = ctx->cu;
    if (ctx->arch != 90) {
        space_free(&space);
        if (space_load(space_path, ctx->arch, 0, &space, &err) != FG_OK) {
            say("tune", "%s", err.msg);
            goto done;
        }
    }
    fg_tune_identity id;
    if (tune_identity(ctx, &id, &err) != FG_OK) {
        say("tune", "%s", err.msg);
        goto done;
    }
    char path[PATH_MAX];
    fg_disk_cache cache;
    fg_error cerr;
    fg_error_clear(&cerr);
    int have_cache = cache_open(&cache, NULL, &cerr) == FG_OK;
    if (o->db) {
        if (snprintf(path, sizeof path, "%s", o->db) >= (int)sizeof path) {
            say("tune", "--db path is longer than %d bytes", (int)sizeof path - 1);
            goto done;
        }
    } else if (!have_cache) {
        say("tune", "the tuning database lives in the disk cache directory, which is unusable (%s); give --db FILE",
            cerr.msg);
        goto done;
    } else if (tunedb_path(cache.dir, &id, path, sizeof path, &err) != FG_OK) {
        say("tune", "%s", err.msg);
        goto done;
    }
    if (tune_open_db(path, &id, &db) != 0) goto done;
    int resumed_records = db.count;

    /* The plan: every (problem, candidate) in order, with what to do with it. */
    int nitems = 0;
    for (int i = 0; i < space.count; i++) nitems += space.problems[i].ncands;
    tune_item *items = calloc(nitems > 0 ? (size_t)nitems : 1, sizeof *items);
    pool.queue = malloc((nitems > 0 ? (size_t)nitems : 1) * sizeof *pool.queue);
    pool.items = items;
    if (!items || !pool.queue) {
        say("tune", "out of memory planning %d candidates", nitems);
        goto done;
    }
    int skipped = 0, refused = 0, timed = 0;
    if (tune_plan(&space, &db, ctx, items, nitems, &skipped, &refused) != 0) {
        say("tune", "out of memory planning %d candidates", nitems);
        goto done;
    }
    for (int k = 0; k < nitems; k++) {
        timed += items[k].action == TUNE_TIME;
        if (items[k].action == TUNE_TIME && items[k].compile_of == k) pool.queue[pool.nqueue++] = k;
    }

    char arch[16];
    spec_arch_format(ctx->arch, ctx->arch == 90, arch, sizeof arch);
    R.space_path = space_path;
    R.space = &space;
    R.ctx = ctx;
    R.cu = cu;
    R.db = &db;
    R.db_path = path;
    R.items = items;
    R.opt = o;
    R.planned = nitems - skipped;
    R.work_planned = timed;
    R.tty = isatty(STDERR_FILENO);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int jobs = o->jobs > 0 ? o->jobs : (cpus > 0 ? (int)cpus : 1);
    if (jobs > pool.nqueue) jobs = pool.nqueue;
    tune_print(&R, TUNE_INFO, "%s (%s, %d SMs), CUDA driver %d.%d, NVRTC %s, flashgen %s", id.device, arch, id.sm_count,
               id.driver_version / 1000, id.driver_version % 1000 / 10, id.nvrtc, id.flashgen);
    if (resumed_records) tune_print(&R, TUNE_INFO, "database %s: %d records, resuming", path, resumed_records);
    else tune_print(&R, TUNE_INFO, "database %s: new", path);
    char compiling[96] = "";
    if (pool.nqueue > 0)
        snprintf(compiling, sizeof compiling, " (%d variant%s to compile on %d thread%s)", pool.nqueue,
                 pool.nqueue == 1 ? "" : "s", jobs, jobs == 1 ? "" : "s");
    tune_print(&R, TUNE_INFO, "%s: %d problem%s, %d candidates: %d already measured, %d refused, %d to time%s",
               space_path, space.count, space.count == 1 ? "" : "s", nitems, skipped, refused, timed, compiling);
    if (R.planned == 0) {
        tune_print(&R, TUNE_INFO, "every candidate of %s is in the database already", space_path);
        status = tune_print_table(&R) == 0 ? EXIT_OK : EXIT_FAIL;
        goto done;
    }

    /* The GPU side: the device's primary context (the one the fg_context retained) current on this thread
     * for the CLI's own allocations, one non-blocking stream, and the L2 size the inputs must exceed. */
    CUresult rc = cu->cuDevicePrimaryCtxRetain(&pctx, ctx->device);
    if (rc == CUDA_SUCCESS) {
        retained = 1;
        rc = cu->cuCtxPushCurrent(pctx);
    }
    if (rc == CUDA_SUCCESS) {
        pushed = 1;
        rc = cu->cuStreamCreate(&R.stream, CU_STREAM_NON_BLOCKING);
    }
    if (rc != CUDA_SUCCESS) {
        cuda_api_fail(&err, rc, "setting up the GPU (cuDevicePrimaryCtxRetain, cuCtxPushCurrent, cuStreamCreate)",
                      __FILE__, __LINE__);
        say("tune", "%s", err.msg);
        goto done;
    }
    int l2 = 0;
    if (cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ctx->device) != CUDA_SUCCESS || l2 <= 0)
        l2 = 60 << 20; /* H100/H200 class, if the driver does not say */
    R.l2_bytes = (double)l2;

    /* Ctrl-C (or a TERM from a job scheduler) finishes the current candidate, then saves. */
    tune_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tune_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    if (sigaction(SIGINT, &sa, &old_int) != 0 || sigaction(SIGTERM, &sa, &old_term) != 0) {
        say("tune", "cannot install the interrupt handler (%s)", strerror(errno));
        goto done;
    }
    handlers = 1;

    pool.space = &space;
    pool.disk = have_cache ? &cache : NULL;
    if (pthread_mutex_init(&pool.lock, NULL) != 0) {
        say("tune", "cannot initialize the compile queue's lock");
        goto done;
    }
    if (pthread_cond_init(&pool.compiled, NULL) != 0) {
        pthread_mutex_destroy(&pool.lock);
        say("tune", "cannot initialize the compile queue's condition variable");
        goto done;
    }
    pool_init = 1;
    if (pool.nqueue > 0) {
        threads = calloc((size_t)jobs, sizeof *threads);
        int why = 0;
        if (threads) nthreads = start_threads(tune_worker, &pool, jobs, threads, &why);
        if (nthreads == 0) {
            say("tune", "could not start any compile thread (%s)", strerror(threads ? why : ENOMEM));
            goto done;
        }
    }

    R.t0 = now_seconds();
    int outcome = TUNE_GO_ON;
    for (int i = 0, first = 0; i < space.count && outcome == TUNE_GO_ON; i++) {
        int end = first + space.problems[i].ncands;
        outcome = tune_problem(&R, &pool, i, first, end);
        if (tune_save(&R) != 0) outcome = TUNE_FATAL; /* after every problem, and whatever stopped it */
        first = end;
    }
    status = tune_finish(&R, outcome);

done:
    if (pool_init) {
        pthread_mutex_lock(&pool.lock);
        pool.stop = 1;
        pthread_mutex_unlock(&pool.lock);
    }
    for (int t = 0; t < nthreads; t++) pthread_join(threads[t], NULL); /* a compile in flight finishes */
    free(threads);
    if (pool_init) {
        pthread_cond_destroy(&pool.compiled);
        pthread_mutex_destroy(&pool.lock);
    }
    if (handlers) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    if (pushed) cu->cuCtxSynchronize();
    if (R.stream) cu->cuStreamDestroy(R.stream);
    if (pushed) cu->cuCtxPopCurrent(&popped);
    if (retained) cu->cuDevicePrimaryCtxRelease(ctx->device);
    if (ctx) fg_context_destroy(ctx);
    free(pool.items);
    free(pool.queue);
    tunedb_free(&db);
    space_free(&space);
    return status;
}

/* `flashgen tune --show [FILE]`: prints a database. With file NULL, this GPU's (device) default one,
 * which must be for this GPU; with a file, any database, no GPU needed. Returns the exit status. */
static int tune_show(const char *file, int device) {
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
        fg_status st = tune_identity(ctx, &id, &err);
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
    st = tunedb_format_table(&db, stdout, &err);
    tunedb_free(&db);
    if (st != FG_OK) {
        say("tune", "%s", err.msg);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

enum { OPT_BUDGET = 512, OPT_DB, OPT_SHOW };

/* `flashgen tune SPACE [--device N] [--budget S] [--db FILE] [-j N] [--iters N]` and `tune --show [FILE]`. */
static int cmd_tune(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"device", required_argument, NULL, OPT_DEVICE},
                                         {"budget", required_argument, NULL, OPT_BUDGET},
                                         {"db", required_argument, NULL, OPT_DB},
                                         {"jobs", required_argument, NULL, 'j'},
                                         {"iters", required_argument, NULL, OPT_ITERS},
                                         {"show", no_argument, NULL, OPT_SHOW},
                                         {NULL, 0, NULL, 0}};
    const char *db = NULL;
    long long device = 0, budget = -1, jobs = -1, iters = -1;
    int show = 0, c;
    while ((c = getopt_long(argc, argv, ":hj:", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'h': fputs(usage_tune, stdout); return EXIT_OK;
        case OPT_DEVICE: bad = parse_number("tune", "--device", optarg, 0, 1023, &device); break;
        case OPT_BUDGET: bad = parse_number("tune", "--budget", optarg, 1, 100000000, &budget); break;
        case OPT_DB: db = optarg; break;
        case 'j': bad = parse_number("tune", "-j/--jobs", optarg, 1, 1024, &jobs); break;
        case OPT_ITERS: bad = parse_number("tune", "--iters", optarg, 1, 1000000, &iters); break;
        case OPT_SHOW: show = 1; break;
        default: return bad_option("tune", argv, c);
        }
        if (bad) return EXIT_USAGE;
    }
    if (db && !db[0]) return usage_error("tune", "--db needs a file name");
    if (show) {
        if (budget >= 0 || jobs >= 0 || iters >= 0)
            return usage_error("tune", "--show prints a database; --budget, -j and --iters belong to a sweep");
        if (optind + 1 < argc) return usage_error("tune", "--show takes at most one FILE, got also '%s'", argv[optind + 1]);
        if (optind < argc && db) return usage_error("tune", "give the database to show as FILE or with --db, not both");
        return tune_show(optind < argc ? argv[optind] : db, (int)device);
    }
    if (optind >= argc) return usage_error("tune", "a SPACE file is required (for example configs/tune_fwd.lua)");
    if (optind + 1 < argc) return usage_error("tune", "one SPACE file is expected, got also '%s'", argv[optind + 1]);
    if (db && check_output_dir("tune", db)) return EXIT_FAIL;
    tune_opts o = {(int)device, budget > 0 ? (double)budget : 0, jobs > 0 ? (int)jobs : 0, iters > 0 ? (int)iters : 20, db};
    return tune_sweep(argv[optind], &o);
}

/* ------------------------------------------------------------------ info */

/* Accumulates entry counts for `info` and `cache verify`. */
typedef struct cache_tally {
    long long entries;   /* entries visited */
    long long bad;       /* entries that did not verify */
    unsigned long long bytes; /* payload bytes of the good entries */
} cache_tally;

/* cache_visit callback: counts entries and bytes. */
static void tally_entry(void *user, const char *file, const char *name, uint64_t len, int verified, const char *why) {
    cache_tally *t = user;
    t->entries++;
    if (verified) t->bytes += len;
    else t->bad++;
}

/* Prints the GPU lines of `info`. Returns 0, or 1 when a device could not be queried. */
static int info_devices(const fg_cuda_api *cu) {
    fg_error err;
    fg_error_clear(&err);
    int count = 0, driver = 0;
    CUresult rc = cu->cuDeviceGetCount(&count);
    if (rc != CUDA_SUCCESS) {
        cuda_api_fail(&err, rc, "cuDeviceGetCount", __FILE__, __LINE__);
        say("info", "%s", err.msg);
        return 1;
    }
    if (count == 0) {
        printf("GPU:            no CUDA device: the driver sees none\n");
        return 0;
    }
    if (cu->cuDriverGetVersion(&driver) == CUDA_SUCCESS)
        printf("CUDA driver:    %d.%d\n", driver / 1000, driver % 1000 / 10);
    for (int i = 0; i < count; i++) {
        CUdevice d;
        char name[256] = "";
        int major = 0, minor = 0, sms = 0, smem = 0;
        size_t mem = 0;
        if (cu->cuDeviceGet(&d, i) != CUDA_SUCCESS || cu->cuDeviceGetName(name, (int)sizeof name, d) != CUDA_SUCCESS ||
            cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) != CUDA_SUCCESS ||
            cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d) != CUDA_SUCCESS ||
            cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) != CUDA_SUCCESS ||
            cu->cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d) != CUDA_SUCCESS ||
            cu->cuDeviceTotalMem(&mem, d) != CUDA_SUCCESS) {
            say("info", "could not query CUDA device %d", i);
            return 1;
        }
        int arch = major * 10 + minor;
        char target[64];
        /* The same choice the dispatcher makes: sm_90a on Hopper (wgmma/TMA need the 'a' target). */
        if (arch < 80) snprintf(target, sizeof target, "none (flashgen needs compute capability 8.0+)");
        else spec_arch_format(arch, arch == 90, target, sizeof target);
        printf("GPU %d:          %s, compute capability %d.%d, %d SMs, %.1f GiB, %d bytes shared memory per block\n", i,
               name, major, minor, sms, (double)mem / (1024.0 * 1024.0 * 1024.0), smem);
        printf("  target arch:  %s\n", target);
    }
    return 0;
}

/* `flashgen info`. */
static int cmd_info(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_info, stdout);
            return EXIT_OK;
        }
        return bad_option("info", argv, c);
    }
    if (optind < argc) return usage_error("info", "unexpected argument '%s'", argv[optind]);
    printf("flashgen:       %s\n", FG_VERSION_STRING);
    printf("NVRTC:          %s\n", compile_nvrtc_version());
    fg_error err;
    fg_error_clear(&err);
    fg_disk_cache cache;
    if (cache_open(&cache, NULL, &err) != FG_OK) {
        printf("disk cache:     unusable: %s\n", err.msg);
    } else {
        cache_tally t = {0, 0, 0};
        int n = cache_visit(&cache, tally_entry, &t, &err);
        if (n < 0) printf("disk cache:     %s (unreadable: %s)\n", cache.dir, err.msg);
        else
            printf("disk cache:     %s, %lld entries, %llu bytes%s\n", cache.dir, t.entries, t.bytes,
                   t.bad ? " (some entries are bad: run 'flashgen cache verify')" : "");
    }
    int status = EXIT_OK;
    const fg_cuda_api *cu = cuda_api_get(&err);
    if (!cu) printf("GPU:            no CUDA device: %s\n", err.msg);
    else if (info_devices(cu) != 0) status = EXIT_FAIL;
    if (fflush(stdout) != 0) {
        say("info", "could not write to stdout (%s)", strerror(errno));
        return EXIT_FAIL;
    }
    return status;
}

/* ------------------------------------------------------------------ cache */

/* One visited cache entry, kept so `ls` can print in a stable (sorted) order. */
typedef struct cache_row {
    char *file;          /* entry file name */
    char *name;          /* spec name, or NULL when unreadable */
    uint64_t len;        /* payload bytes */
    int verified;        /* 1 when header and checksum agree */
    char *why;           /* why not verified, or NULL */
} cache_row;

/* The rows collected by collect_row. */
typedef struct cache_rows {
    cache_row *rows;     /* grown as entries are visited */
    size_t count, cap;   /* used / allocated */
    int failed;          /* 1 after an allocation failed */
} cache_rows;

/* Copies a string (NULL stays NULL); sets *failed when memory runs out. */
static char *dup_or_null(const char *s, int *failed) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *failed = 1;
    return d;
}

/* cache_visit callback: keeps a copy of each entry's description. */
static void collect_row(void *user, const char *file, const char *name, uint64_t len, int verified, const char *why) {
    cache_rows *r = user;
    if (r->failed) return;
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        cache_row *n = realloc(r->rows, cap * sizeof *n);
        if (!n) {
            r->failed = 1;
            return;
        }
        r->rows = n;
        r->cap = cap;
    }
    cache_row *row = &r->rows[r->count++];
    row->file = dup_or_null(file, &r->failed);
    row->name = dup_or_null(name, &r->failed);
    row->why = dup_or_null(verified ? NULL : why, &r->failed);
    row->len = len;
    row->verified = verified;
}

/* Orders rows by file name. */
static int cmp_row(const void *a, const void *b) {
    const cache_row *x = a, *y = b;
    return strcmp(x->file ? x->file : "", y->file ? y->file : "");
}

/* `flashgen cache ls|verify|clear [--dir DIR]`. */
static int cmd_cache(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"dir", required_argument, NULL, 'd'},
                                         {NULL, 0, NULL, 0}};
    const char *dir = NULL;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(usage_cache, stdout); return EXIT_OK;
        case 'd': dir = optarg; break;
        default: return bad_option("cache", argv, c);
        }
    }
    if (optind >= argc) return usage_error("cache", "an action is required: ls, verify or clear");
    const char *action = argv[optind];
    if (strcmp(action, "ls") != 0 && strcmp(action, "verify") != 0 && strcmp(action, "clear") != 0)
        return usage_error("cache", "unknown action '%s' (ls, verify or clear)", action);
    if (optind + 1 < argc) return usage_error("cache", "unexpected argument '%s'", argv[optind + 1]);

    fg_error err;
    fg_error_clear(&err);
    fg_disk_cache cache;
    if (cache_open(&cache, dir, &err) != FG_OK) {
        say("cache", "%s", err.msg);
        return EXIT_FAIL;
    }
    if (strcmp(action, "clear") == 0) {
        int n = cache_clear(&cache, &err);
        if (n < 0) {
            say("cache", "%s", err.msg);
            return EXIT_FAIL;
        }
        printf("removed %d entr%s from %s\n", n, n == 1 ? "y" : "ies", cache.dir);
        return EXIT_OK;
    }

    cache_rows r = {NULL, 0, 0, 0};
    int n = cache_visit(&cache, collect_row, &r, &err);
    int status = EXIT_OK;
    if (n < 0 || r.failed) {
        say("cache", "%s", n < 0 ? err.msg : "out of memory listing the cache");
        status = EXIT_FAIL;
        goto done;
    }
    if (r.count > 1) qsort(r.rows, r.count, sizeof *r.rows, cmp_row); /* qsort(NULL, 0) is undefined */
    size_t bad = 0;
    unsigned long long bytes = 0;
    for (size_t i = 0; i < r.count; i++) {
        cache_row *row = &r.rows[i];
        if (!row->verified) bad++;
        else bytes += row->len;
        if (strcmp(action, "ls") == 0) {
            if (row->verified) printf("%s  %s  %llu\n", row->file, row->name ? row->name : "-", (unsigned long long)row->len);
            else printf("%s  %s  %llu  BAD: %s\n", row->file, row->name ? row->name : "-", (unsigned long long)row->len,
                        row->why ? row->why : "does not verify");
        } else if (!row->verified) {
            say("cache", "%s/%s: %s", cache.dir, row->file, row->why ? row->why : "does not verify");
        }
    }
    if (strcmp(action, "verify") == 0) {
        printf("%zu entr%s in %s: %zu good (%llu bytes), %zu bad\n", r.count, r.count == 1 ? "y" : "ies", cache.dir,
               r.count - bad, bytes, bad);
        if (bad) {
            say("cache", "%zu entr%s failed verification; 'flashgen cache clear' removes them (they would be "
                "recompiled anyway)", bad, bad == 1 ? "y" : "ies");
            status = EXIT_FAIL;
        }
    }
done:
    for (size_t i = 0; i < r.count; i++) {
        free(r.rows[i].file);
        free(r.rows[i].name);
        free(r.rows[i].why);
    }
    free(r.rows);
    return status;
}

/* ------------------------------------------------------------------ main */

/* A subcommand: its name and entry point. */
typedef struct command {
    const char *name;                   /* as typed */
    int (*run)(int argc, char **argv);  /* argv[0] is the command name */
} command;

static const command commands[] = {
    {"gen", cmd_gen},       {"compile", cmd_compile}, {"list", cmd_list}, {"bundle", cmd_bundle},
    {"run", cmd_run},       {"explain", cmd_explain}, {"tune", cmd_tune}, {"info", cmd_info},
    {"cache", cmd_cache},
};

/* Prints the main usage with the validation rule names filled in, wrapped to the text's width. */
static void print_main_usage(FILE *f) {
    char rules[2048] = "  ";
    size_t used = 2, line_start = 0;
    for (int i = 0; i < spec_rule_count() && used < sizeof rules - 64; i++) {
        const char *name = spec_rule_name(i);
        const char *sep = i == 0 ? "" : (used - line_start + strlen(name) + 2 > 100 ? ",\n  " : ", ");
        if (sep[0] && sep[1] == '\n') line_start = used + 2;
        int n = snprintf(rules + used, sizeof rules - used, "%s%s", sep, name);
        if (n < 0) break;
        used += (size_t)n < sizeof rules - used ? (size_t)n : sizeof rules - used - 1;
    }
    fprintf(f, usage_main, rules);
}

/* Dispatches to the subcommand named by argv[1]. */
int main(int argc, char **argv) {
    if (argc < 2) {
        print_main_usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        if (strcmp(name, "help") == 0 && argc > 2) {
            /* `flashgen help CMD` is `flashgen CMD --help`. */
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (strcmp(argv[2], commands[i].name) == 0) {
                    char help[] = "--help";
                    char *sub[] = {argv[2], help, NULL};
                    opterr = 0;
                    return commands[i].run(2, sub);
                }
            fprintf(stderr, "flashgen: unknown command '%s'; run 'flashgen --help' for the list\n", argv[2]);
            return EXIT_USAGE;
        }
        print_main_usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("flashgen %s\n", FG_VERSION_STRING);
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0) {
            opterr = 0; /* bad_option prints our own message */
            optind = 1;
            int rc = commands[i].run(argc - 1, argv + 1);
            if (fflush(stdout) != 0 && rc == EXIT_OK) {
                fprintf(stderr, "flashgen %s: could not write to stdout (%s)\n", name, strerror(errno));
                return EXIT_FAIL;
            }
            return rc;
        }
    if (name[0] == '-') fprintf(stderr, "flashgen: unknown option '%s'; run 'flashgen --help'\n", name);
    else fprintf(stderr, "flashgen: unknown command '%s'; run 'flashgen --help' for the list\n", name);
    return EXIT_USAGE;
}
