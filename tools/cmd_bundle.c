/* cmd_bundle.c: `flashgen bundle`: every variant of a config compiled by NVRTC on a pool of threads
 * (core/pool.c), a progress line per variant, then one bundle file or C source written atomically; a
 * variant that spills registers is refused unless --allow-spills. Part of the `flashgen` program; cli.h
 * lists its files. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "autotune/timing.h"
#include "core/files.h"
#include "core/pool.h"
#include "flashgen.h"
#include "generator/config.h"
#include "generator/emit.h"
#include "generator/spec.h"
#include "runtime/bundle.h"
#include "runtime/compile.h"
#include "tools/cli.h"

static const char usage_bundle[] =
    "usage: flashgen bundle CONFIG -o FILE [--arch LIST] [-j N] [--emit-c] [--symbol NAME] [--allow-spills]\n"
    "       flashgen bundle ls FILE        list a bundle's variants: name, arch, bytes (no GPU)\n"
    "       flashgen bundle verify FILE    check every checksum of a bundle (no GPU; exit 1 naming each bad entry)\n"
    "(a CONFIG file named ls or verify is given as ./ls)\n"
    "\n"
    "Compiles every variant CONFIG lists with N threads and writes them as one bundle file, which\n"
    "fg_bundle_load() reads before any JIT compile. Progress goes to stderr, a line per finished variant:\n"
    "  [ 3/40] 0.8 s  arch=sm_90a,block_m=128,...  (172 regs, 0 spill)\n"
    "then a summary with the wall time. The bundle is refused (exit 1, nothing written) if any variant\n"
    "fails to compile or spills registers to local memory (unless --allow-spills); the failures are\n"
    "named. FILE is written atomically only after every compile succeeded, so a failed or interrupted\n"
    "run leaves no FILE.\n"
    "\n"
    "  -o, --output FILE   the bundle file (required)\n"
    "      --arch LIST     comma-separated targets replacing every variants{} arch field; variants a\n"
    "                      target cannot build (e4m3 below sm_89, tma=1 below sm_90, ...) are skipped with\n"
    "                      one stderr line each naming the variant and the rule, and the rest is bundled\n"
    "                      (exit 1 when none is left). Without --arch every variant must build.\n"
    "  -j, --jobs N        parallel compiles (default: the number of online CPUs)\n"
    "      --emit-c        write a C source instead: `const unsigned char NAME[]` and\n"
    "                      `const unsigned long NAME_size`, for fg_bundle_load_memory()\n"
    "      --symbol NAME   the array's name with --emit-c (default flashgen_bundle)\n"
    "      --allow-spills  bundle variants that spill too, each named in a warning: the backward's fastest\n"
    "                      tiles spill a few bytes on sm_90 (generator/tile_policy.c), so an application that\n"
    "                      must not JIT (options.strict) bundles them this way\n";

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

/* The size of a file, or -1 when it cannot be stat'ed (only for messages). */
static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
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

/* Runs `nthreads` workers over the pool (pool_run). Returns 0, or -1 when no thread at all could be
 * started (errno-style code in *why_errno). */
static int bundle_run_pool(bundle_pool *pool, int nthreads, int *why_errno) {
    return pool_run(bundle_worker, pool, nthreads, why_errno) > 0 ? 0 : -1;
}

/* config_skip_fn of `bundle --arch` and `list --arch` (user: the command's name): one stderr line per variant
 * the arch cannot build. */
void report_skipped_variant(void *user, const char *name, const char *why) {
    say((const char *)user, "skipping %s: %s", name, why);
}

/* ------------------------------------------------------------------ bundle ls, bundle verify */

static const char usage_bundle_ls[] =
    "usage: flashgen bundle ls FILE\n"
    "\n"
    "Lists the variants of the bundle FILE, one line each: canonical name, arch, cubin bytes. Needs no GPU.\n"
    "The bundle's structure and index checksum are checked (exit 1 if they are wrong); a foreign generator\n"
    "version or a payload that does not match its checksum is said on stderr (`bundle verify` checks all).\n";

static const char usage_bundle_verify[] =
    "usage: flashgen bundle verify FILE\n"
    "\n"
    "Checks the bundle FILE as fg_bundle_load() would, without a GPU: its structure, the index checksum, that\n"
    "this flashgen made it, and every payload's SHA-256. Prints one line when all is well; otherwise exits 1\n"
    "with a line on stderr for each bad entry (and for a foreign generator version).\n";

/* The value of the arch= field of a canonical name, into out ("?" when the name has none). */
static void name_arch(const char *name, size_t len, char *out, size_t n) {
    for (size_t i = 0; i + 5 <= len; i++)
        if ((i == 0 || name[i - 1] == ',') && memcmp(name + i, "arch=", 5) == 0) {
            size_t j = i + 5, k = 0;
            while (j < len && name[j] != ',' && k + 1 < n) out[k++] = name[j++];
            out[k] = '\0';
            return;
        }
    snprintf(out, n, "?");
}

/* `flashgen bundle ls FILE` (verify = 0) and `flashgen bundle verify FILE` (verify = 1); argv[0] is the
 * subcommand's name. */
static int cmd_bundle_read(int argc, char **argv, int verify) {
    const char *cmd = verify ? "bundle verify" : "bundle ls";
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(verify ? usage_bundle_verify : usage_bundle_ls, stdout);
            return EXIT_OK;
        }
        return bad_option(cmd, argv, c);
    }
    if (optind >= argc) return usage_error(cmd, "a bundle FILE is required");
    if (optind + 1 < argc) return usage_error(cmd, "one bundle FILE is expected, got also '%s'", argv[optind + 1]);
    const char *path = argv[optind];
    uint8_t *data;
    size_t len;
    fg_error err;
    fg_error_clear(&err);
    bundle_index ix;
    if (fg_read_file_max(path, FG_BUNDLE_MAX_BYTES, &data, &len, &err) != FG_OK) {
        say(cmd, "%s", err.msg);
        return EXIT_FAIL;
    }
    if (bundle_inspect(data, len, &ix, &err) != FG_OK) {
        say(cmd, "%s: %s", path, err.msg);
        free(data);
        return EXIT_FAIL;
    }
    char id[32];
    emit_templates_id(id, sizeof id);
    int bad = 0;
    if (!ix.generator_ok) {
        say(cmd, "%s: made by flashgen '%s', this is %s: fg_bundle_load refuses it (rebuild the bundle)", path,
            ix.generator, id);
        bad++;
    }
    for (size_t i = 0; i < ix.count; i++) {
        const bundle_item *it = &ix.items[i];
        if (!it->sum_ok) {
            say(cmd, "%s: entry %.*s: its %zu bytes do not match their checksum", path, (int)it->name_len, it->name,
                it->size);
            bad++;
        }
        if (!verify) {
            char arch[32];
            name_arch(it->name, it->name_len, arch, sizeof arch);
            printf("%.*s  %s  %zu\n", (int)it->name_len, it->name, arch, it->size);
        }
    }
    if (verify && !bad)
        printf("%s: %zu entries, every checksum matches (made by this flashgen, %s)\n", path, ix.count, id);
    else if (verify)
        say(cmd, "%s: %d problem%s in %zu entries", path, bad, bad == 1 ? "" : "s", ix.count);
    bundle_index_free(&ix);
    free(data);
    return verify && bad ? EXIT_FAIL : EXIT_OK;
}

/* `flashgen bundle CONFIG -o FILE [--arch LIST] [-j N] [--emit-c] [--symbol NAME]`, or `bundle ls|verify FILE`. */
int cmd_bundle(int argc, char **argv) {
    /* ls and verify as the first argument select the subcommands; a config file named so is ./ls. */
    if (argc > 1 && (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "verify") == 0))
        return cmd_bundle_read(argc - 1, argv + 1, argv[1][0] == 'v');
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"arch", required_argument, NULL, 'a'},
                                         {"jobs", required_argument, NULL, 'j'},
                                         {"emit-c", no_argument, NULL, 'c'},
                                         {"symbol", required_argument, NULL, 's'},
                                         {"allow-spills", no_argument, NULL, 'S'},
                                         {NULL, 0, NULL, 0}};
    const char *out = NULL, *arch = NULL, *symbol = "flashgen_bundle";
    long long jobs = 0;
    int emit_c = 0, symbol_given = 0, allow_spills = 0, c;
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
        case 'S': allow_spills = 1; break;
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
    /* --arch replaces the config's archs, which the config was not written for: variants the new arch cannot
     * build are skipped, one line each. Without --arch the config's own archs must all build. */
    fg_status lst = arch ? config_load_file_skipping(config_path, arch, report_skipped_variant, "bundle", &cfg, &err)
                         : config_load_file(config_path, NULL, &cfg, &err);
    if (lst != FG_OK) {
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
        if (job->result.spill_stores > 0 && allow_spills) {
            say("bundle", "warning: %s spills registers (%d bytes of stores, %d of loads); bundled (--allow-spills)",
                job->name, job->result.spill_stores, job->result.spill_loads);
        } else if (job->result.spill_stores > 0) {
            say("bundle", "%s spills registers (%d bytes of stores, %d of loads): give it other tiles, drop it, or "
                "pass --allow-spills", job->name, job->result.spill_stores, job->result.spill_loads);
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
