/* cli_tune.c: `flashgen tune`, the sweep of a tuning space on the GPU (parallel compiles, checked and
 * timed candidates, resume, budget, interrupt-safe saves) and `tune --show`. Part of the `flashgen`
 * program; the GPU buffers, check and timing loop come from cli_gpu.c, the rest from cli.c (cli.h). */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
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
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/knobs.h"
#include "runtime/call_args.h"
#include "runtime/cache.h"
#include "tools/cli.h"
#include "runtime/compile.h"
#include "runtime/cuda_api.h"
#include "generator/emit.h"
#include "flashgen.h"
#include "reference/reference.h" /* the CPU reference `run` and `tune` check against; build.ninja links reference.o */
#include "runtime/runtime.h"   /* rt_fwd_with_spec and the context's device facts, for `tune` */
#include "autotune/space.h"
#include "generator/spec.h"
#include "runtime/tunedb.h"

/* ------------------------------------------------------------------ usage texts */

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
    int allow_spills;            /* --allow-spills: time candidates that spill too */
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
    int shard;       /* with nshards > 0: this process is worker `shard` of a --device list, and times the */
    int nshards;     /*   problems whose index i has i % nshards == shard (the others are left out) */
    int allow_spills; /* time candidates that spill registers too (noted), instead of recording them as spilled */
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
    char tag[24];                    /* "[gpu N] " in a worker of a multi-GPU sweep, else "" */
    int line_open;                   /* that line is on screen without its newline */
    double best_ms;                  /* the current problem's fastest ok time; 0 until there is one */
    fg_spec best;                    /* its variant */
} tune_run;

/* The current problem's GPU side. */
typedef struct tune_gpu {
    problem p;                /* the shape it is timed at */
    fwd_buffers B;            /* inputs and outputs, allocated at its first candidate that runs */
    int bwd;                  /* the problem's kind is "bwd" */
    problem pc;               /* kind "bwd": the small problem of the same class each candidate is checked on */
    bwd_buffers BB, BC;       /* kind "bwd": the timed problem's tensors and the check problem's */
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
    if (R) fputs(R->tag, stderr);
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
    snprintf(buf, n, "%sd%d %s%s%s sq %d sk %d bh %d", pb->cls.kind == FG_KIND_BWD ? "backward " : "", pb->cls.head_dim,
             dtype_name(pb->cls.dtype),
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
    snprintf(line, sizeof line, "%s[%*d/%d] %s: %s %s | best %s | eta %s", R->tag, width, R->done, R->planned, what, tiles,
             outcome, best, eta);
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

/* Compiles spec with NVRTC and reads its ptxas report. A cubin that does not spill (or any, with
 * allow_spills) is stored in `disk` (when not NULL) under the key the runtime computes for the same spec, so
 * rt_fwd_with_spec loads it instead of compiling again; a failed store costs only that second compile. Sets
 * *status (ok, failed, spilled) and note (the failure sentence, the spill figures or the register count). */
static void tune_compile(const fg_spec *spec, const fg_disk_cache *disk, int allow_spills, fg_tune_status *status,
                         char *note, size_t n) {
    fg_error err;
    fg_error_clear(&err);
    char *src = NULL;
    size_t len = 0;
    fg_compile_result r;
    memset(&r, 0, sizeof r);
    if (emit_source(spec, &src, &len, &err) != FG_OK || compile_source(spec, src, len, 0, &r, &err) != FG_OK) {
        *status = FG_TUNE_FAILED;
        tune_note(note, n, "%s", err.msg);
    } else if (r.spill_stores > 0 && !allow_spills) {
        *status = FG_TUNE_SPILLED;
        tune_note(note, n, "spills %d bytes of stores and %d of loads to local memory (%d registers)", r.spill_stores,
                 r.spill_loads, r.registers);
    } else {
        *status = FG_TUNE_OK;
        if (r.registers < 0) tune_note(note, n, "no ptxas report: spills unknown");
        else if (r.spill_stores > 0)
            tune_note(note, n, "%d registers, spills %d+%d bytes (--allow-spills)", r.registers, r.spill_stores,
                     r.spill_loads);
        else tune_note(note, n, "%d registers", r.registers);
        if (disk) {
            uint8_t key[32];
            char name[FG_SPEC_NAME_MAX];
            fg_error werr;
            compile_cache_key(spec, 0, src, len, key);
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
        tune_compile(&pool->space->problems[it->problem].cands[it->cand].spec, pool->disk, pool->allow_spills, &status,
                     note, sizeof note);
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
static int tune_gpu_prepare_bwd(tune_run *R, tune_gpu *G, int pi) {
    const fg_tune_problem *pb = &R->space->problems[pi];
    const double bytes = bwd_copy_bytes(&G->p), mib = 1024.0 * 1024.0;
    tune_bwd_check_shape(&G->p, &G->pc);
    fg_error err;
    fg_error_clear(&err);
    if (bwd_buffers_init(R->ctx, &G->p, 1000 + (uint64_t)pi, &G->BB, &err) != FG_OK ||
        bwd_buffers_init(R->ctx, &G->pc, 5000 + (uint64_t)pi, &G->BC, &err) != FG_OK) {
        bwd_buffers_free(R->cu, &G->BB);
        bwd_buffers_free(R->cu, &G->BC);
        tune_print(R, TUNE_ERR, "%s:%d: cannot set up the backward problem's tensors (%.1f MiB): %s", R->space_path,
                   pb->line, bytes / mib, err.msg);
        return -1;
    }
    G->ready = 1;
    if (bytes < R->l2_bytes)
        snprintf(G->l2note, sizeof G->l2note, "tensors (%.1f MiB) fit in L2: times may be optimistic", bytes / mib);
    else
        G->l2note[0] = '\0';
    tune_print(R, TUNE_INFO, "timing the backward at batch %lld x heads %lld (heads_kv %lld): %.1f MiB of tensors and "
               "%.1f MiB of workspace; each candidate checked first at batch 1 x heads %lld, seqlen_q %lld, seqlen_k %lld",
               G->p.batch, G->p.heads, G->p.heads_kv, bytes / mib, (double)G->BB.ws_bytes / mib, G->pc.heads,
               G->pc.seqlen_q, G->pc.seqlen_k);
    return 0;
}

/* Allocates and fills the current problem's tensors, at its first candidate that runs. One copy when
 * a copy is at least the L2 size; else enough copies (up to FWD_MAX_COPIES) that between two uses of
 * one copy the others have passed a whole L2 through the cache (kind "bwd": tune_gpu_prepare_bwd).
 * Returns 0, or -1 after printing why. */
static int tune_gpu_prepare(tune_run *R, tune_gpu *G, int pi) {
    const fg_tune_problem *pb = &R->space->problems[pi];
    if (G->bwd) return tune_gpu_prepare_bwd(R, G, pi);
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

/* What a backward timing launches: one candidate on the timed problem (its three kernels). */
typedef struct tune_launch_bwd {
    fg_context *ctx;         /* the context */
    const fg_spec *spec;     /* the candidate */
    const fg_bwd_args *args; /* the timed problem */
    CUstream stream;         /* where */
} tune_launch_bwd;

/* launch_fn of a backward `tune`. */
static fg_status tune_launch_one_bwd(void *user, int i, fg_error *err) {
    (void)i;
    const tune_launch_bwd *t = user;
    return rt_bwd_with_spec(t->ctx, t->spec, t->args, t->stream, err);
}

/* The timing of a checked candidate: 3 warm-up and --iters launches of `launch`, the median into *ms and the
 * TFLOP/s at `flops` a launch into *tflops, *st ok. The launches' or the events' failure otherwise. */
static fg_status tune_time(tune_run *R, launch_fn launch, void *user, double flops, fg_tune_status *st, double *ms,
                           double *tflops, fg_error *err) {
    launch_times t;
    fg_status s = time_launches(R->cu, R->stream, 3, R->opt->iters, launch, user, &t, err);
    if (s != FG_OK) return s;
    if (!(t.median > 0))
        return fg_fail(err, FG_ERR_CUDA, "the CUDA events measured no time (median %g ms)", t.median);
    *st = FG_TUNE_OK;
    *ms = t.median;
    *tflops = flops / (t.median * 1e-3) / 1e12;
    return FG_OK;
}

/* tune_measure for kind "bwd": one launch on the check problem's poisoned gradients and the full check of
 * dQ, dK and dV against the CPU references (TESTING.md's rule for gradients); a candidate that passes is timed
 * on the timed problem (3 warm-up and --iters launches; TFLOP/s at 2.5 x the forward's FLOPs, the protocol's
 * backward count). */
static fg_status tune_measure_bwd(tune_run *R, tune_gpu *G, const fg_spec *spec, const char *compile_note,
                                  fg_tune_status *st, double *ms, double *tflops, char *note, size_t n, fg_error *err) {
    const fg_cuda_api *cu = R->cu;
    fg_status s;
    *st = FG_TUNE_FAILED;
    *ms = *tflops = 0;
    if ((s = bwd_poison(cu, &G->BC, err)) != FG_OK) return s;
    if ((s = rt_bwd_with_spec(R->ctx, spec, &G->BC.dev, R->stream, err)) != FG_OK) return s;
    FG_CU(err, cu->cuStreamSynchronize(R->stream));
    ref_bwd_report rep;
    if ((s = bwd_check(cu, &G->BC, &G->pc, &rep, err)) != FG_OK) return s;
    if (!rep.pass) {
        char line[1024];
        ref_bwd_report_format(&rep, line, sizeof line);
        *st = FG_TUNE_WRONG;
        tune_note(note, n, "check at batch 1 x heads %lld, seqlen_q %lld, seqlen_k %lld: %.900s", G->pc.heads,
                 G->pc.seqlen_q, G->pc.seqlen_k, line);
        return FG_OK;
    }
    tune_launch_bwd tl = {R->ctx, spec, &G->BB.dev, R->stream};
    if ((s = tune_time(R, tune_launch_one_bwd, &tl, 2.5 * fwd_flops(&G->p), st, ms, tflops, err)) != FG_OK) return s;
    const ref_grad_report *g[3] = {&rep.dq, &rep.dk, &rep.dv};
    double worst = 0; /* each bound is at least REF_BWD_ATOL */
    for (int i = 0; i < 3; i++)
        if (g[i]->max_err / g[i]->bound > worst) worst = g[i]->max_err / g[i]->bound;
    tune_note(note, n, "gradients checked (largest error %.2f of its bound); %s%s%s", worst, compile_note,
             G->l2note[0] ? "; " : "", G->l2note);
    return FG_OK;
}

/* Runs candidate spec on the current problem: one launch on poisoned outputs, the check of its slice,
 * then the timing. Fills *st (ok or wrong), *ms, *tflops and note (compile_note is the compile's).
 * Returns FG_OK, or the failure of a launch or a driver call: the candidate is then recorded as failed
 * and the caller looks whether the context survived. */
static fg_status tune_measure(tune_run *R, tune_gpu *G, const fg_spec *spec, const char *compile_note,
                              fg_tune_status *st, double *ms, double *tflops, char *note, size_t n, fg_error *err) {
    if (G->bwd) return tune_measure_bwd(R, G, spec, compile_note, st, ms, tflops, note, n, err);
    const fg_cuda_api *cu = R->cu;
    fg_status s;
    *st = FG_TUNE_FAILED;
    *ms = *tflops = 0;
    if ((s = fwd_poison(cu, &G->B, 0, err)) != FG_OK) return s;
    if ((s = rt_fwd_with_spec(R->ctx, spec, &G->B.dev[0], R->stream, err)) != FG_OK) return s;
    FG_CU(err, cu->cuStreamSynchronize(R->stream));
    ref_report rep;
    if ((s = fwd_check(cu, &G->B, &G->p, spec, 0, 1, G->check_heads, G->check_row0, &rep, err)) != FG_OK) return s;
    if (!rep.pass) {
        char line[1024];
        ref_report_format(&rep, line, sizeof line);
        *st = FG_TUNE_WRONG;
        tune_note(note, n, "check of batch 0, heads 0-%lld, rows %lld-%lld: %.900s", (long long)G->check_heads - 1,
                 (long long)G->check_row0, G->p.seqlen_q - 1, line);
        return FG_OK;
    }
    tune_launch tl = {R->ctx, spec, &G->B, R->stream};
    if ((s = tune_time(R, tune_launch_one, &tl, fwd_flops(&G->p), st, ms, tflops, err)) != FG_OK) return s;
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
    G.bwd = pb->cls.kind == FG_KIND_BWD;
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
        bwd_buffers_free(R->cu, &G.BB);
        bwd_buffers_free(R->cu, &G.BC);
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
 * says why), time the rest, each compiled once per spec; in a worker (o->nshards > 1), skip the other
 * workers' problems. Counts into *skipped, *others and *refused. Returns 0, or -1 when memory runs out. */
static int tune_plan(const fg_tune_space *sp, const fg_tunedb *db, const fg_context *ctx, const tune_opts *o,
                     tune_item *items, int n, int *skipped, int *others, int *refused) {
    *skipped = *others = *refused = 0;
    for (int i = 0, k = 0; i < sp->count && k < n; i++) {
        const fg_tune_problem *pb = &sp->problems[i];
        for (int j = 0; j < pb->ncands && k < n; j++, k++) {
            const fg_tune_candidate *c = &pb->cands[j];
            tune_item *it = &items[k];
            it->problem = i;
            it->cand = j;
            if (o->nshards > 1 && i % o->nshards != o->shard) {
                it->action = TUNE_SKIP; /* another worker's problem */
                ++*others;
            } else if (tunedb_has(db, &pb->cls, &c->spec)) {
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
    if (R->opt->nshards > 0) return EXIT_OK; /* a worker: the parent merges and prints the table */
    return tune_print_table(R) == 0 ? EXIT_OK : EXIT_FAIL;
}

static int tune_merge_parts(const char *path, const fg_tune_identity *id, int *added);
static int tune_lock(const char *path);

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
    int nthreads = 0, pool_init = 0, pushed = 0, retained = 0, handlers = 0, status = EXIT_FAIL, lock_fd = -1;
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
    /* main() has turned the CUDA compute cache off (CUDA_CACHE_DISABLE=1): a cached NVRTC compile has no
     * ptxas report, and a spilling candidate would pass for a clean one (seen on the H200 host: 87 of
     * 1080 compiles before that). */
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
    /* Backward candidates take their loads as dispatch will give them these tiles (TMA on sm_90 at head_dim
     * 64-256 in 64s where the tile allows: rt_bwd_tma), so what is timed is what a tuned call runs. */
    for (int i = 0; i < space.count; i++)
        for (int c = 0; c < space.problems[i].ncands && space.problems[i].cls.kind == FG_KIND_BWD; c++) {
            fg_tune_candidate *cand = &space.problems[i].cands[c];
            if (cand->status == FG_OK) cand->spec.tma = rt_bwd_tma(ctx, &cand->spec);
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
    if (o->nshards == 0) { /* a worker writes its own part; the parent holds the lock and merges */
        if ((lock_fd = tune_lock(path)) < 0) goto done;
        int merged = 0;
        if (tune_merge_parts(path, &id, &merged) != 0) goto done;
        if (merged) tune_print(NULL, TUNE_INFO, "merged %d records left by a multi-GPU run into %s", merged, path);
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
    int skipped = 0, others = 0, refused = 0, timed = 0;
    if (tune_plan(&space, &db, ctx, o, items, nitems, &skipped, &others, &refused) != 0) {
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
    R.planned = nitems - skipped - others;
    R.work_planned = timed;
    R.tty = o->nshards == 0 && isatty(STDERR_FILENO); /* workers share the terminal: a line each */
    if (o->nshards > 0) snprintf(R.tag, sizeof R.tag, "[gpu %d] ", o->device);
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
    char share[96] = "";
    if (o->nshards > 1)
        snprintf(share, sizeof share, " (this worker: every %d%s problem from number %d)", o->nshards,
                 o->nshards == 2 ? "nd" : o->nshards == 3 ? "rd" : "th", o->shard + 1);
    tune_print(&R, TUNE_INFO, "%s: %d problem%s%s, %d candidates: %d already measured, %d for other workers, %d refused, "
               "%d to time%s", space_path, space.count, space.count == 1 ? "" : "s", share, nitems, skipped, others,
               refused, timed, compiling);
    if (R.planned == 0) {
        tune_print(&R, TUNE_INFO, "every candidate of %s is in the database already", space_path);
        status = o->nshards > 0 || tune_print_table(&R) == 0 ? EXIT_OK : EXIT_FAIL; /* workers: the parent prints */
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
    pool.allow_spills = o->allow_spills;
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
    if (lock_fd >= 0) close(lock_fd);
    return status;
}

/* ---- several GPUs: one worker process per device ---- */

#define TUNE_MAX_DEVICES 64

/* One worker of a multi-GPU sweep: `flashgen tune SPACE --device D --db PART --shard K/N`. The parts are
 * named "<database>.gpu<D>.w<K>.part" (K: the worker's index in this run). */
typedef struct tune_child {
    int device;           /* CUDA ordinal */
    int group;            /* its database group (GPU model) */
    char part[PATH_MAX];  /* its own database file: the group's records at start, its results added */
    pid_t pid;            /* 0 until started */
    int status;           /* its exit status once it ended; -1 if it could not start or was killed */
} tune_child;

/* The devices of one GPU model: they share a database, and the space's problems are dealt among them. */
typedef struct tune_group {
    fg_tune_identity id;  /* the model, driver, NVRTC and flashgen version */
    char path[PATH_MAX];  /* the database */
    int ndev;             /* its devices */
} tune_group;

/* Whether two identities are the same GPU model and software stack (so one database serves both). */
static int tune_same_identity(const fg_tune_identity *a, const fg_tune_identity *b) {
    return strcmp(a->device, b->device) == 0 && a->arch == b->arch && a->sm_count == b->sm_count &&
           a->driver_version == b->driver_version && strcmp(a->nvrtc, b->nvrtc) == 0 &&
           strcmp(a->flashgen, b->flashgen) == 0;
}

/* The worker files of the database at path: "<path>.gpu<D>.w<K>.part" in its directory (this run's, or
 * ones a killed run left), found by name (not glob(3): the path may hold glob metacharacters). Fills
 * *names (malloc'ed full paths, *n of them; caller frees each and the array). Returns 0, or -1 after
 * printing why. */
static int tune_list_parts(const char *path, char ***names, int *n) {
    *names = NULL;
    *n = 0;
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path == 0 ? 1 : slash - path), path);
    else snprintf(dir, sizeof dir, ".");
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        say("tune", "cannot list %s for worker files: %s", dir, strerror(errno));
        return -1;
    }
    int cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        size_t len = strlen(nm);
        if (len < blen + 9 || strncmp(nm, base, blen) != 0 || strncmp(nm + blen, ".gpu", 4) != 0 ||
            strcmp(nm + len - 5, ".part") != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            char **grown = realloc(*names, (size_t)cap * sizeof *grown);
            if (!grown) {
                rc = -1;
                break;
            }
            *names = grown;
        }
        size_t need = strlen(dir) + 1 + len + 1;
        char *full = malloc(need);
        if (!full) {
            rc = -1;
            break;
        }
        snprintf(full, need, "%s/%s", dir, nm);
        (*names)[(*n)++] = full;
    }
    closedir(d);
    if (rc != 0) say("tune", "out of memory listing worker files");
    return rc;
}

/* Folds every worker file of the database at path (tune_list_parts) into it: records of the parts replace
 * the same (class, variant) in the database, which is then saved atomically, and only then are the merged
 * parts removed. A part for another identity or a corrupt one (FG_ERR_FORMAT) is moved aside with a
 * message, never merged; any other failure (I/O, memory) stops the merge with every part kept. *added
 * counts the records the parts added or changed. Returns 0, or -1 after printing why. */
static int tune_merge_parts(const char *path, const fg_tune_identity *id, int *added) {
    *added = 0;
    char **names = NULL;
    int n = 0;
    if (tune_list_parts(path, &names, &n) != 0) return -1;
    if (n == 0) return 0;
    int *merged = calloc((size_t)n, sizeof *merged);
    fg_tunedb db;
    memset(&db, 0, sizeof db);
    int rc = merged && tune_open_db(path, id, &db) == 0 ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) {
        fg_tunedb part;
        memset(&part, 0, sizeof part);
        fg_error err;
        fg_error_clear(&err);
        fg_status st = tunedb_load(names[i], id, &part, &err);
        if (st == FG_ERR_FORMAT) {
            char moved[PATH_MAX + 64];
            say("tune", "not merging %s: %s", names[i], err.msg);
            if (tune_move_aside(names[i], moved, sizeof moved) == 0) say("tune", "moved it to %s", moved);
            else say("tune", "and cannot move it aside (%s); it stays", strerror(errno));
            tunedb_free(&part);
            continue;
        }
        if (st != FG_OK) {
            say("tune", "cannot read %s: %s; nothing merged, the worker files are kept", names[i], err.msg);
            rc = -1;
            tunedb_free(&part);
            break;
        }
        for (int r = 0; r < part.count && rc == 0; r++) {
            const fg_tune_record *x = &part.records[r];
            *added += !tunedb_has(&db, &x->cls, &x->spec);
            if (tunedb_add(&db, x, &err) != FG_OK) {
                say("tune", "merging %s: %s", names[i], err.msg);
                rc = -1;
            }
        }
        merged[i] = rc == 0;
        tunedb_free(&part);
    }
    if (rc == 0) {
        fg_error err;
        fg_error_clear(&err);
        if (tunedb_save(path, &db, &err) != FG_OK) {
            say("tune", "%s", err.msg);
            rc = -1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (rc == 0 && merged && merged[i] && unlink(names[i]) != 0 && errno != ENOENT)
            say("tune", "merged, but cannot remove %s: %s", names[i], strerror(errno));
        free(names[i]);
    }
    free(names);
    free(merged);
    tunedb_free(&db);
    return rc;
}

/* Takes an exclusive lock on "<path>.lock" for this sweep, so two sweeps never fill one database (or its
 * worker files) at once; the lock goes with the process. Returns the descriptor (keep it open), or -1
 * after printing why. */
static int tune_lock(const char *path) {
    char lock[PATH_MAX + 8];
    if (snprintf(lock, sizeof lock, "%s.lock", path) >= (int)sizeof lock) {
        say("tune", "the database path %s is too long for its lock file", path);
        return -1;
    }
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        say("tune", "cannot open the lock file %s: %s", lock, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        say("tune", "another `flashgen tune` is filling %s (%s is locked); wait for it, or give another --db", path,
            lock);
        close(fd);
        return -1;
    }
    return fd;
}

/* Starts `flashgen tune SPACE --device D --db PART --shard K/N ...` as child c (this same program, via
 * /proc/self/exe). Returns 0, or -1 after printing why. */
static int tune_spawn(tune_child *c, const char *space_path, const tune_opts *o, int shard, int nshards, int jobs) {
    char dev[16], shard_text[32], budget[32], jobs_text[16], iters[16];
    snprintf(dev, sizeof dev, "%d", c->device);
    snprintf(shard_text, sizeof shard_text, "%d/%d", shard, nshards);
    snprintf(jobs_text, sizeof jobs_text, "%d", jobs);
    snprintf(iters, sizeof iters, "%d", o->iters);
    char *argv[20]; /* 17 at most, NULL included */
    int n = 0;
    argv[n++] = "flashgen";
    argv[n++] = "tune";
    argv[n++] = (char *)space_path;
    argv[n++] = "--device";
    argv[n++] = dev;
    argv[n++] = "--db";
    argv[n++] = c->part;
    argv[n++] = "--shard";
    argv[n++] = shard_text;
    argv[n++] = "-j";
    argv[n++] = jobs_text;
    argv[n++] = "--iters";
    argv[n++] = iters;
    if (o->budget > 0) {
        snprintf(budget, sizeof budget, "%.0f", o->budget);
        argv[n++] = "--budget";
        argv[n++] = budget;
    }
    if (o->allow_spills) argv[n++] = "--allow-spills";
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        say("tune", "cannot start the worker for device %d: %s", c->device, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Its own process group: a terminal's Ctrl-C reaches only the parent, which passes one SIGINT on
         * (a second one, from the terminal, would kill a worker mid-candidate); and a worker whose parent
         * dies is told to stop (SIGTERM: it finishes the candidate and saves its part). */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "flashgen tune: cannot run the worker for device %d (/proc/self/exe): %s\n", c->device,
                strerror(errno));
        _exit(127);
    }
    c->pid = pid;
    return 0;
}

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
        if (*ndev == TUNE_MAX_DEVICES) return usage_error("tune", "--device '%s': at most %d devices", text, TUNE_MAX_DEVICES);
        devs[(*ndev)++] = (int)v;
        if (*end == '\0') return 0;
        p = end + 1;
    }
}

/* The signal that asked a multi-GPU sweep to stop (forwarded to its workers), or 0. */
static volatile sig_atomic_t tune_parent_signal;
static void tune_on_parent_signal(int sig) { tune_parent_signal = sig; }

/* `flashgen tune SPACE --device all|LIST`: one worker process per GPU. Devices of one model (same name,
 * compute capability, SM count, driver and NVRTC) share one database and the space's problems are dealt
 * among them round-robin; each model gets its own database and sweeps the whole space. Each worker
 * starts from a copy of its model's database (so what is measured is skipped) and writes its own part
 * file; the parent merges the parts into the database when the workers end, however they end, and
 * prints the table. Returns the exit status: 0 when every worker succeeded. */
static int tune_parallel(const char *space_path, const tune_opts *o, const int *list, int nlist, int all) {
    fg_error err;
    fg_error_clear(&err);
    fg_tune_space space;
    memset(&space, 0, sizeof space);
    if (space_load(space_path, 90, 1, &space, &err) != FG_OK) {
        say("tune", "%s", err.msg);
        return EXIT_FAIL;
    }
    int status = EXIT_FAIL, ndev = 0, ngroups = 0, nchildren = 0, handlers = 0;
    int devs[TUNE_MAX_DEVICES], locks[TUNE_MAX_DEVICES];
    for (int g = 0; g < TUNE_MAX_DEVICES; g++) locks[g] = -1;
    tune_group *groups = calloc(TUNE_MAX_DEVICES, sizeof *groups);
    tune_child *kids = calloc(TUNE_MAX_DEVICES, sizeof *kids);
    struct sigaction old_int, old_term;
    if (!groups || !kids) {
        say("tune", "out of memory");
        goto done;
    }
    if (tune_check_shapes(space_path, &space) != 0) goto done;
    const fg_cuda_api *cu = cuda_api_get(&err);
    int count = 0;
    if (!cu || cu->cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) {
        say("tune", "no CUDA device to tune on%s%s", cu ? "" : ": ", cu ? "" : err.msg);
        goto done;
    }
    if (all) {
        for (int d = 0; d < count && d < TUNE_MAX_DEVICES; d++) devs[ndev++] = d;
    } else {
        for (int i = 0; i < nlist; i++) {
            if (list[i] >= count) {
                say("tune", "--device %d: this machine has %d CUDA device%s (0-%d)", list[i], count, count == 1 ? "" : "s",
                    count - 1);
                goto done;
            }
            devs[ndev++] = list[i];
        }
    }
    fg_disk_cache cache;
    fg_error cerr;
    fg_error_clear(&cerr);
    int have_cache = cache_open(&cache, NULL, &cerr) == FG_OK;
    for (int i = 0; i < ndev; i++) {
        fg_context *ctx = open_context("tune", devs[i], FG_LOG_WARN, "");
        if (!ctx) goto done;
        fg_tune_identity id;
        fg_status st = tune_identity(ctx, &id, &err);
        fg_context_destroy(ctx);
        if (st != FG_OK) {
            say("tune", "device %d: %s", devs[i], err.msg);
            goto done;
        }
        int g = 0;
        while (g < ngroups && !tune_same_identity(&groups[g].id, &id)) g++;
        if (g == ngroups) {
            groups[g].id = id;
            if (o->db) {
                if (ngroups == 1) {
                    say("tune", "--db names one database, but devices %d and %d are different GPUs (%s, %s): leave "
                        "--db out and each model gets its own", devs[0], devs[i], groups[0].id.device, id.device);
                    goto done;
                }
                snprintf(groups[g].path, sizeof groups[g].path, "%s", o->db);
            } else if (!have_cache) {
                say("tune", "the tuning databases live in the disk cache directory, which is unusable (%s); give --db "
                    "FILE", cerr.msg);
                goto done;
            } else if (tunedb_path(cache.dir, &id, groups[g].path, sizeof groups[g].path, &err) != FG_OK) {
                say("tune", "%s", err.msg);
                goto done;
            }
            ngroups++;
        }
        kids[i].device = devs[i];
        kids[i].group = g;
        kids[i].status = -1;
        if (snprintf(kids[i].part, sizeof kids[i].part, "%s.gpu%d.w%d.part", groups[g].path, devs[i], i) >=
            (int)sizeof kids[i].part) {
            say("tune", "the database path %s is too long for its worker files", groups[g].path);
            goto done;
        }
        groups[g].ndev++;
    }
    nchildren = ndev;

    /* Each model's database, locked for the sweep, with the parts a killed run may have left folded in,
     * seeds its workers. */
    for (int g = 0; g < ngroups; g++) {
        if ((locks[g] = tune_lock(groups[g].path)) < 0) goto done;
        int merged = 0;
        if (tune_merge_parts(groups[g].path, &groups[g].id, &merged) != 0) goto done;
        if (merged) tune_print(NULL, TUNE_INFO, "merged %d records left by an earlier run into %s", merged, groups[g].path);
        fg_tunedb db;
        memset(&db, 0, sizeof db);
        if (tune_open_db(groups[g].path, &groups[g].id, &db) != 0) goto done;
        int ok = 1;
        for (int i = 0; i < ndev && ok; i++)
            if (kids[i].group == g && tunedb_save(kids[i].part, &db, &err) != FG_OK) {
                say("tune", "%s", err.msg);
                ok = 0;
            }
        tune_print(NULL, TUNE_INFO, "%s: %d device%s, database %s (%d records)", groups[g].id.device, groups[g].ndev,
                   groups[g].ndev == 1 ? "" : "s", groups[g].path, db.count);
        tunedb_free(&db);
        if (!ok) goto done;
    }

    /* The workers: compile threads split evenly over them unless -j says otherwise. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int jobs = o->jobs > 0 ? o->jobs : (int)((cpus > 0 ? cpus : 1) / ndev);
    if (jobs < 1) jobs = 1;
    tune_parent_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tune_on_parent_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, &old_int) != 0 || sigaction(SIGTERM, &sa, &old_term) != 0) {
        say("tune", "cannot install the interrupt handler (%s)", strerror(errno));
        goto done;
    }
    handlers = 1;
    int started = 0;
    for (int g = 0; g < ngroups && !tune_parent_signal; g++)
        for (int i = 0, k = 0; i < ndev && !tune_parent_signal; i++)
            if (kids[i].group == g && tune_spawn(&kids[i], space_path, o, k++, groups[g].ndev, jobs) == 0) started++;
    tune_print(NULL, TUNE_INFO, "%d worker%s started, %d compile thread%s each", started, started == 1 ? "" : "s", jobs,
               jobs == 1 ? "" : "s");
    int forwarded = 0;
    for (int left = started; left > 0;) {
        /* Polled, so a signal that lands at any moment is passed on within 50 ms. */
        if (tune_parent_signal && !forwarded) {
            for (int i = 0; i < ndev; i++)
                if (kids[i].pid > 0) kill(kids[i].pid, tune_parent_signal == SIGINT ? SIGINT : SIGTERM);
            forwarded = 1;
        }
        int ws;
        pid_t pid = waitpid(-1, &ws, WNOHANG);
        if (pid == 0 || (pid < 0 && errno == EINTR)) {
            struct timespec nap = {0, 50 * 1000 * 1000};
            nanosleep(&nap, NULL);
            continue;
        }
        if (pid < 0) {
            say("tune", "waiting for the workers: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < ndev; i++)
            if (kids[i].pid == pid) {
                kids[i].status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
                kids[i].pid = -pid; /* ended */
                if (kids[i].status != 0)
                    say("tune", "the worker for device %d %s %d", kids[i].device,
                        WIFEXITED(ws) ? "exited with status" : "was killed by signal",
                        WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
                left--;
            }
    }

    /* Whatever happened, what the workers saved is merged. */
    status = started == nchildren ? EXIT_OK : EXIT_FAIL;
    for (int i = 0; i < ndev; i++)
        if (kids[i].status != 0) status = EXIT_FAIL;
    for (int g = 0; g < ngroups; g++) {
        int merged = 0;
        if (tune_merge_parts(groups[g].path, &groups[g].id, &merged) != 0) {
            status = EXIT_FAIL;
            continue;
        }
        tune_print(NULL, TUNE_INFO, "%s: merged the workers' parts (%d new records) into %s", groups[g].id.device, merged,
                   groups[g].path);
        if (status != EXIT_OK) continue;
        fg_tunedb db;
        memset(&db, 0, sizeof db);
        if (tune_open_db(groups[g].path, &groups[g].id, &db) != 0) {
            status = EXIT_FAIL;
            continue;
        }
        tune_run R;
        memset(&R, 0, sizeof R);
        R.space = &space;
        R.db = &db;
        if (tune_print_table(&R) != 0) status = EXIT_FAIL;
        tunedb_free(&db);
    }
    if (tune_parent_signal && status != EXIT_OK)
        say("tune", "interrupted; what the workers saved is in the database or their part files; resume with the same "
            "command");

done:
    if (handlers) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    for (int g = 0; g < TUNE_MAX_DEVICES; g++)
        if (locks[g] >= 0) close(locks[g]);
    free(groups);
    free(kids);
    space_free(&space);
    return status;
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
    int devs[TUNE_MAX_DEVICES] = {0};
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
            if (errno || n < 1 || n > TUNE_MAX_DEVICES || k < 0 || k >= n)
                return usage_error("tune", "--shard '%s': expected K/N with 0 <= K < N <= %d (set by --device lists)",
                                   optarg, TUNE_MAX_DEVICES);
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
    tune_opts o = {devs[0], budget > 0 ? (double)budget : 0, jobs > 0 ? (int)jobs : 0, iters > 0 ? (int)iters : 20, db,
                   shard > 0 ? shard : 0, nshards, allow_spills};
    if (all || ndev > 1) return tune_parallel(argv[optind], &o, devs, ndev, all);
    return tune_sweep(argv[optind], &o);
}
