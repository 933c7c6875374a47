/* cmd_info.c: `flashgen info` (versions, the disk cache, the GPUs, the environment knobs) and
 * `flashgen cache ls|verify|clear`: what a user asks about the installation and its caches. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/knobs.h"
#include "flashgen.h"
#include "generator/spec.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/cuda_api.h"
#include "tools/cli.h"

/* ------------------------------------------------------------------ usage texts */

static const char usage_info[] =
    "usage: flashgen info\n"
    "\n"
    "Prints the flashgen and NVRTC versions, the disk cache location with its entry count and size (or\n"
    "why it is unusable), and for each GPU: name, compute capability, SM count, memory, driver version\n"
    "and the arch flashgen compiles for on it (sm_90a on compute capability 9.0). Without a GPU it says\n"
    "why and still exits 0. Then every FLASHGEN_* environment variable: its default, its value when set,\n"
    "and what it does; those marked `measuring` exist to measure or test flashgen, not for users.\n";

static const char usage_cache[] =
    "usage: flashgen cache ls|verify|clear|prune [--dir DIR] [--max-mb N]\n"
    "\n"
    "  ls       one line per entry: file, variant name, cubin bytes (bad entries say why)\n"
    "  verify   checks every entry's header and checksum; exits 1 naming each bad one\n"
    "  clear    removes every entry (and stale temporary files); other files are kept\n"
    "  prune    removes the least recently used entries until the entries fit the bound, and the\n"
    "           temporary files killed writers left\n"
    "ls and verify also count the temporary files in the directory (writes in progress, or left by\n"
    "killed writers: those are removed whenever a context opens the cache).\n"
    "\n"
    "      --dir DIR       the cache directory (default: $FLASHGEN_CACHE_DIR, else\n"
    "                      $XDG_CACHE_HOME/flashgen, else ~/.cache/flashgen)\n"
    "      --max-mb N      prune: the bound in MiB, 0 for none (default: $FLASHGEN_CACHE_MAX_MB, else 4096)\n";

/* ------------------------------------------------------------------ info */

/* The cache's bound in words: "bound N MiB", or "no bound" for 0 (FLASHGEN_CACHE_MAX_MB=0, --max-mb 0). */
static void bound_text(unsigned long long bytes, char *out, size_t n) {
    if (bytes == 0) snprintf(out, n, "no bound");
    else snprintf(out, n, "bound %llu MiB", bytes >> 20);
}

/* Accumulates entry counts for `info` and `cache verify`. */
typedef struct cache_tally {
    long long entries;   /* entries visited */
    long long bad;       /* entries that did not verify */
    unsigned long long bytes; /* payload bytes of the good entries */
} cache_tally;

/* cache_visit callback: counts entries and bytes. */
static void tally_entry(void *user, const char *file, const char *name, uint64_t len, int verified, const char *why,
                        int ptx) {
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

/* Prints the environment section of `info`: every knob of core/knobs.h's table with its default, its value
 * when set, and its meaning. */
static void info_knobs(void) {
    printf("environment:    (`measuring`: for measuring or testing flashgen, not for users)\n");
    for (int i = 0; i < FG_KNOB_COUNT; i++) {
        const fg_knob *k = knob_info((fg_knob_id)i);
        const char *v = knob_value((fg_knob_id)i);
        printf("  %s%s: %s%s%s (default: %s)\n      %s\n", k->name, k->measuring ? " (measuring)" : "",
               v ? "set to '" : "unset", v ? v : "", v ? "'" : "", k->default_value, k->meaning);
    }
}

/* `flashgen info`. */
int cmd_info(int argc, char **argv) {
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
        {
            fg_cache_usage u;
            if (cache_usage(&cache, &u, &err) != FG_OK) u.tmp_files = u.tmp_bytes = 0;
            char bound[48];
            bound_text(cache.max_bytes, bound, sizeof bound);
            printf("disk cache:     %s, %lld entries, %llu bytes (%s), %llu temporary file%s (%llu bytes)%s\n",
                   cache.dir, t.entries, t.bytes, bound, u.tmp_files, u.tmp_files == 1 ? "" : "s", u.tmp_bytes,
                   t.bad ? " (some entries are bad: run 'flashgen cache verify')" : "");
        }
    }
    int status = EXIT_OK;
    const fg_cuda_api *cu = cuda_api_get(&err);
    if (!cu) printf("GPU:            no CUDA device: %s\n", err.msg);
    else if (info_devices(cu) != 0) status = EXIT_FAIL;
    info_knobs();
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
    int ptx;             /* 1 for a PTX payload (FLASHGEN_EMULATE_ARCH), 0 for a cubin */
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
static void collect_row(void *user, const char *file, const char *name, uint64_t len, int verified, const char *why,
                        int ptx) {
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
    row->ptx = ptx;
}

/* Orders rows by file name. */
static int cmp_row(const void *a, const void *b) {
    const cache_row *x = a, *y = b;
    return strcmp(x->file ? x->file : "", y->file ? y->file : "");
}

/* `flashgen cache ls|verify|clear [--dir DIR]`. */
int cmd_cache(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"dir", required_argument, NULL, 'd'},
                                         {"max-mb", required_argument, NULL, 'm'},
                                         {NULL, 0, NULL, 0}};
    const char *dir = NULL, *max_mb = NULL;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(usage_cache, stdout); return EXIT_OK;
        case 'd': dir = optarg; break;
        case 'm': max_mb = optarg; break;
        default: return bad_option("cache", argv, c);
        }
    }
    if (optind >= argc) return usage_error("cache", "an action is required: ls, verify, clear or prune");
    const char *action = argv[optind];
    if (strcmp(action, "ls") != 0 && strcmp(action, "verify") != 0 && strcmp(action, "clear") != 0 &&
        strcmp(action, "prune") != 0)
        return usage_error("cache", "unknown action '%s' (ls, verify, clear or prune)", action);
    unsigned long long bound = 0;
    if (max_mb) {
        char *end;
        errno = 0;
        bound = strtoull(max_mb, &end, 10);
        if (errno || *end || !max_mb[0] || max_mb[0] == '-' || bound > (1ull << 40))
            return usage_error("cache", "--max-mb must be a number of MiB from 0 to 2^40, got '%s'", max_mb);
        if (strcmp(action, "prune") != 0) return usage_error("cache", "--max-mb is an option of prune only");
    }
    if (optind + 1 < argc) return usage_error("cache", "unexpected argument '%s'", argv[optind + 1]);

    fg_error err;
    fg_error_clear(&err);
    fg_disk_cache cache;
    if (cache_open(&cache, dir, &err) != FG_OK) {
        say("cache", "%s", err.msg);
        return EXIT_FAIL;
    }
    if (strcmp(action, "prune") == 0) {
        int removed;
        unsigned long long freed;
        const unsigned long long limit = max_mb ? bound << 20 : cache.max_bytes;
        if (cache_prune(&cache, limit, &removed, &freed, &err) != FG_OK) {
            say("cache", "%s", err.msg);
            return EXIT_FAIL;
        }
        fg_cache_usage u;
        if (cache_usage(&cache, &u, &err) != FG_OK) {
            say("cache", "%s", err.msg);
            return EXIT_FAIL;
        }
        char shown[48];
        bound_text(limit, shown, sizeof shown);
        printf("removed %d file%s (%llu bytes) from %s; %llu entries (%llu bytes) remain, %s\n", removed,
               removed == 1 ? "" : "s", freed, cache.dir, u.entries, u.entry_bytes, shown);
        return EXIT_OK;
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
            if (row->verified) /* PTX entries (FLASHGEN_EMULATE_ARCH) share their variant's name: marked */
                printf("%s  %s  %llu%s\n", row->file, row->name ? row->name : "-", (unsigned long long)row->len,
                       row->ptx ? "  ptx" : "");
            else printf("%s  %s  %llu  BAD: %s\n", row->file, row->name ? row->name : "-", (unsigned long long)row->len,
                        row->why ? row->why : "does not verify");
        } else if (!row->verified) {
            say("cache", "%s/%s: %s", cache.dir, row->file, row->why ? row->why : "does not verify");
        }
    }
    fg_cache_usage u;
    if (cache_usage(&cache, &u, &err) == FG_OK && u.tmp_files > 0)
        printf("%llu temporary file%s (%llu bytes): writes in progress, or left by killed writers\n", u.tmp_files,
               u.tmp_files == 1 ? "" : "s", u.tmp_bytes);
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

