/* cli.c: the `flashgen` program, a thin shell over the library for people and scripts.
 *
 * One function per subcommand (cmd_gen, cmd_compile, ...), each parsing its own options with
 * getopt_long and returning the process's exit status: 0 success, 1 failure, 2 usage error. Messages go
 * to stderr as "flashgen <cmd>: <sentence>"; results go to stdout, so `flashgen list cfg.lua | wc -l`
 * and `flashgen gen SPEC > k.cu` work. The usage texts double as the reference documentation (the
 * README quotes them), so they say what each option does and what the defaults are.
 *
 * This is the only place in flashgen that prints without being asked or calls exit(): the library
 * returns statuses and sentences, the program turns them into lines and exit codes.
 *
 * The program's files and what they share are listed in cli.h. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/pool.h"
#include "autotune/timing.h"
#include "runtime/bundle.h"
#include "runtime/cache.h"
#include "tools/cli.h"
#include "runtime/compile.h"
#include "generator/config.h"
#include "runtime/cuda_api.h"
#include "generator/emit.h"
#include "flashgen.h"
#include "generator/spec.h"

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
    "  bundle ls|verify FILE    list a bundle's variants, or check every checksum (no GPU needed)\n"
    "  mod FILE                 trace a custom score/mask mod: its id, aux arrays and expression tree\n"
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
    "arch, dtype (fp16, bf16, e4m3, e5m2) and head_dim are required; kind is fwd (the default) or bwd\n"
    "(the backward pass: fp16/bf16, deterministic=0|1; tma=1 on sm_90+ at head_dim 64-256 in 64s: the mma.sync\n"
    "kernel's loads by TMA); causal defaults to 0; out=bf16|fp16 is the\n"
    "output dtype of an fp8 (e4m3, e5m2)\n"
    "variant, bf16 when left out; tile fields left out come from the default tile policy. arch sm_90a\n"
    "selects the Hopper wgmma family (block_m 64, 128 or 192 with 8, 12 or 16 warps); sm_90 and every\n"
    "other target the mma.sync family. The canonical form, which `list` prints and caches and bundles use\n"
    "as the variant's name, has every key, sorted (out only for fp8, tma only when 1):\n"
    "  arch=sm_90,block_m=128,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=8\n"
    "A kind=serve variant may run a custom mod (docs/mods.md), named mod=ID by its id: gen and compile take\n"
    "its file as --mod FILE, which sets mod=. kv=e4m3|e5m2 (kind=serve) makes K and V FP8 beside fp16/bf16 Q:\n"
    "an FP8 KV cache, dequantized in the kernel.\n"
    "A spec that breaks a validation rule is refused with the rule's sentence. The rules, in order:\n"
    "%s\n"
    "\n"
    "CONFIG is a Lua file calling variants{...} (cartesian products of fields) and tile_policy{...}\n"
    "(tile overrides); it runs in a sandbox (no io/os/require, capped memory and instructions). A variant's\n"
    "mod = \"FILE\" names a mod file relative to the config's directory (no absolute path, no '..').\n"
    "\n"
    "Environment variables (FLASHGEN_*): `flashgen info` lists them with their defaults and values.\n"
    "\n"
    "exit status: 0 on success, 1 on failure (stderr says what failed and why), 2 on a usage error.\n";

/* What `flashgen` alone prints (to stderr, exit 2): the commands in a screenful; --help has the rest. */
static const char usage_short[] =
    "usage: flashgen COMMAND [OPTIONS] [ARGUMENTS]\n"
    "\n"
    "commands:\n"
    "  gen SPEC                 print the CUDA source of one kernel variant\n"
    "  compile SPEC -o FILE     compile one variant with NVRTC into a cubin\n"
    "  list CONFIG              print the variants a Lua config lists\n"
    "  bundle CONFIG -o FILE    compile a config's variants into one bundle (bundle ls|verify FILE)\n"
    "  mod FILE                 trace a custom score/mask mod: its id, aux arrays, tree or CUDA\n"
    "  run | explain            run and check one attention call on the GPU | say which kernel it takes\n"
    "  tune SPACE               time a tuning space on this GPU into its tuning database\n"
    "  info | cache             versions and GPUs | list, check or empty the disk cache\n"
    "\n"
    "flashgen COMMAND --help    the options of one command\n"
    "flashgen --help            everything: specs, configs, validation rules, exit statuses\n";

static const char usage_gen[] =
    "usage: flashgen gen SPEC... [--mod FILE]\n"
    "\n"
    "Prints the CUDA source flashgen would compile for the variant SPEC: a prelude of #defines for the\n"
    "spec with the templates it includes expanded once each, in place (one self-contained file, which\n"
    "NVRTC compiles as the prelude plus the templates as headers), byte-for-byte deterministic.\n"
    "Unset tile fields are filled from the default tile policy, then the spec is validated; a refused\n"
    "spec prints the broken rule's sentence and exits 1.\n"
    "\n"
    "      --mod FILE      trace the custom mod in FILE (docs/mods.md) and compile it in: sets the spec's\n"
    "                      mod= to its id (a spec naming another id is refused); kind=serve takes mods\n"
    "\n"
    "example: flashgen gen arch=sm_90a dtype=bf16 head_dim=128 causal=1 > kernel.cu\n"
    "         flashgen gen kind=serve arch=sm_90 dtype=bf16 head_dim=128 --mod alibi.lua > kernel.cu\n";

static const char usage_compile[] =
    "usage: flashgen compile SPEC... -o FILE [--ptx FILE] [--log] [--mod FILE] [--quick]\n"
    "\n"
    "Compiles the variant SPEC with NVRTC (no GPU needed: the target is the spec's arch) and writes the\n"
    "cubin to FILE atomically (a complete file or none). Prints one line: the canonical name, compile\n"
    "seconds, registers per thread, spill bytes (stores/loads) and dynamic shared memory bytes.\n"
    "\n"
    "  -o, --output FILE   where the cubin goes (required)\n"
    "      --ptx FILE      also write the PTX text\n"
    "      --log           print the NVRTC log, including the ptxas resource report\n"
    "      --mod FILE      compile in the custom mod in FILE, as for gen\n"
    "      --quick         compile as the JIT's first tier does (NVRTC's --Ofast-compile=max: faster to\n"
    "                      compile, the code may spill and run slower), to see its time and spills\n";

static const char usage_list[] =
    "usage: flashgen list CONFIG [--arch LIST]\n"
    "\n"
    "Runs the Lua config CONFIG and prints every variant it lists, one canonical spec per line, after\n"
    "filling tiles from the (possibly overridden) tile policy, validating, and dropping duplicates.\n"
    "Config errors are reported as file:line.\n"
    "\n"
    "      --arch LIST     comma-separated targets (sm_80,sm_90a) replacing every variants{} arch field;\n"
    "                      variants they cannot build are skipped, one stderr line each (as bundle --arch)\n";

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
 * kind defaults to fwd, mod to the mod in mod_path when not NULL (mod_option_apply), unset tiles are filled
 * from the default tile policy. Returns 0, EXIT_USAGE when no spec was given, or EXIT_FAIL after printing the
 * parser's, the mod's or the broken rule's sentence. */
static int spec_from_args(const char *cmd, int argc, char **argv, int first, const char *mod_path, fg_spec *spec) {
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
    /* kind defaults to fwd, the family most specs name, so asking people to type it would be ceremony. */
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
    if (mod_path) {
        int rc = mod_option_apply(cmd, mod_path, spec);
        if (rc) return rc;
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

/* `flashgen gen SPEC... [--mod FILE]`: prints the emitted source. */
static int cmd_gen(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"mod", required_argument, NULL, 'm'},
                                         {NULL, 0, NULL, 0}};
    const char *mod = NULL;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(usage_gen, stdout); return EXIT_OK;
        case 'm': mod = optarg; break;
        default: return bad_option("gen", argv, c);
        }
    }
    fg_spec spec;
    int rc = spec_from_args("gen", argc, argv, optind, mod, &spec);
    if (rc) return rc;
    char *src = NULL;
    size_t len = 0;
    fg_error err;
    fg_error_clear(&err);
    /* The flattened source (the prelude with each template it includes expanded once, in place): one file a
     * person can read top to bottom or compile alone, and the same program NVRTC compiles from the prelude
     * and its headers (tests/test_compile.c checks the PTX), rather than a prelude that needs templates/. */
    char *prelude = NULL;
    if (emit_source(&spec, &prelude, NULL, &err) != FG_OK || emit_flatten(prelude, &src, &len, &err) != FG_OK) {
        free(prelude);
        say("gen", "%s", err.msg);
        return EXIT_FAIL;
    }
    free(prelude);
    size_t wrote = fwrite(src, 1, len, stdout);
    free(src);
    if (wrote != len || fflush(stdout) != 0) {
        say("gen", "could not write the source to stdout (%s)", strerror(errno));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------ compile */

/* `flashgen compile SPEC... -o FILE [--ptx FILE] [--log] [--mod FILE] [--quick]`. */
static int cmd_compile(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"ptx", required_argument, NULL, 'p'},
                                         {"log", no_argument, NULL, 'l'},
                                         {"mod", required_argument, NULL, 'm'},
                                         {"quick", no_argument, NULL, 'q'},
                                         {NULL, 0, NULL, 0}};
    const char *out = NULL, *ptx = NULL, *mod = NULL;
    int want_log = 0, quick = 0, c;
    while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(usage_compile, stdout); return EXIT_OK;
        case 'o': out = optarg; break;
        case 'p': ptx = optarg; break;
        case 'l': want_log = 1; break;
        case 'm': mod = optarg; break;
        case 'q': quick = 1; break;
        default: return bad_option("compile", argv, c);
        }
    }
    if (!out) return usage_error("compile", "-o FILE is required (where the cubin goes)");
    fg_spec spec;
    int rc = spec_from_args("compile", argc, argv, optind, mod, &spec);
    if (rc) return rc;
    if (check_output_dir("compile", out) || (ptx && check_output_dir("compile", ptx))) return EXIT_FAIL;

    char name[FG_SPEC_NAME_MAX];
    spec_format(&spec, name, sizeof name);
    fg_compile_result r;
    fg_error err;
    fg_error_clear(&err);
    if (compile_spec(&spec, (ptx ? FG_COMPILE_KEEP_PTX : 0) | (quick ? FG_COMPILE_QUICK : 0), &r, &err) != FG_OK) {
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
    /* As `bundle --arch`: what the given archs cannot build is skipped, a stderr line each. */
    fg_status lst = arch ? config_load_file_skipping(argv[optind], arch, report_skipped_variant, "list", &cfg, &err)
                         : config_load_file(argv[optind], NULL, &cfg, &err);
    if (lst != FG_OK) {
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

/* ------------------------------------------------------------------ main */

/* A subcommand: its name and entry point. */
typedef struct command {
    const char *name;                   /* as typed */
    int (*run)(int argc, char **argv);  /* argv[0] is the command name */
} command;

static const command commands[] = {
    {"gen", cmd_gen},       {"compile", cmd_compile}, {"list", cmd_list}, {"bundle", cmd_bundle},
    {"run", cmd_run},       {"explain", cmd_explain}, {"tune", cmd_tune}, {"info", cmd_info},
    {"cache", cmd_cache},   {"mod", cmd_mod},
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
    /* compile, bundle and tune read ptxas's resource report (registers, spills: a bundle refuses a
     * variant that spills). Where a driver is installed, NVRTC answers a compile it has seen before from
     * the CUDA compute cache without running ptxas, and the report is missing; so those commands turn the
     * cache off for their process (flashgen has its own disk cache for cubins). */
    if (argc > 1 && (strcmp(argv[1], "compile") == 0 || strcmp(argv[1], "bundle") == 0 || strcmp(argv[1], "tune") == 0))
        setenv("CUDA_CACHE_DISABLE", "1", 1);
    if (argc < 2) {
        fputs(usage_short, stderr);
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
