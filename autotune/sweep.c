/* sweep.c: the tuning sweep of one GPU (see sweep.h): it plans the space (plan.c), starts the compile
 * threads, then for each problem records the refused candidates, waits for each compile, checks and times
 * what compiled through the tool's sweep_bench, records every outcome with a progress line, and saves the
 * database after each problem. Ctrl-C finishes the current candidate, saves and stops. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "autotune/plan.h"
#include "autotune/shard.h"
#include "autotune/sweep.h"
#include "autotune/timing.h"
#include "core/pool.h"
#include "generator/spec.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "core/alloc.h"

/* How a problem (or the whole sweep) ended. */
enum { SWEEP_GO_ON = 0, SWEEP_STOPPED = 1, SWEEP_FATAL = 2 };

/* The signal that asked the sweep to stop, or 0. Set by the handler, read between candidates. */
static volatile sig_atomic_t sweep_signal;

/* SIGINT/SIGTERM handler during a sweep: asks it to stop after the current candidate. Installed with
 * SA_RESETHAND, so a second signal takes the default action (the database is saved after every
 * problem and written atomically, so even that loses at most one problem's candidates). */
static void sweep_on_signal(int sig) { sweep_signal = sig; }

/* sweep_print: see sweep.h. */
void sweep_print(sweep_run *R, const char *prefix, const char *fmt, ...) {
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

/* sweep_note: see sweep.h. The database cuts a note at FG_TUNE_NOTE_MAX bytes anyway, so this says once
 * that cutting is intended instead of at every call. */
void sweep_note(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* "d128 bf16 causal gqa 4 sq 2048 sk 2048 bh 128": a problem, short. */
static void sweep_problem_text(const fg_tune_problem *pb, char *buf, size_t n) {
    char gqa[32] = "";
    if (pb->cls.gqa > 1) snprintf(gqa, sizeof gqa, " gqa %d", pb->cls.gqa);
    snprintf(buf, n, "%sd%d %s%s%s sq %d sk %d bh %d", pb->cls.kind == FG_KIND_BWD ? "backward " : "", pb->cls.head_dim,
             dtype_name(pb->cls.dtype),
             pb->cls.causal ? " causal" : "", gqa, pb->seqlen_q, pb->seqlen_k, pb->batch_heads);
}

/* "128x64 w4 s2": a candidate's tiles (block_m x block_n, warps, stages). */
static void sweep_tiles_text(const fg_spec *s, char *buf, size_t n) {
    snprintf(buf, n, "%dx%d w%d s%d", s->block_m, s->block_n, s->warps, s->stages);
}

/* Whether a record's class r is the space problem's class c (whose causal may be any nonzero value). */
static int sweep_same_class(const fg_tune_class *r, const fg_tune_class *c) {
    return r->kind == c->kind && r->dtype == c->dtype && r->head_dim == c->head_dim && r->causal == (c->causal != 0) &&
           r->gqa == c->gqa && r->seqlen_q == c->seqlen_q && r->seqlen_k == c->seqlen_k &&
           r->batch_heads == c->batch_heads;
}

/* Shows progress after a record: "[done/total] problem: tiles outcome | best <ms> <tiles> | eta <s>",
 * rewriting one line on a terminal, else one line per candidate (logs keep every outcome). */
static void sweep_progress(sweep_run *R, const fg_tune_problem *pb, const fg_spec *spec, fg_tune_status st, double ms) {
    char what[128], tiles[48], best[96], eta[32], line[400];
    sweep_problem_text(pb, what, sizeof what);
    sweep_tiles_text(spec, tiles, sizeof tiles);
    char outcome[48];
    if (st == FG_TUNE_OK) snprintf(outcome, sizeof outcome, "ok %.4f ms", ms);
    else snprintf(outcome, sizeof outcome, "%s", tunedb_status_name(st));
    if (R->best_ms > 0) {
        char bt[48];
        sweep_tiles_text(&R->best, bt, sizeof bt);
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
static int sweep_record(sweep_run *R, const fg_tune_problem *pb, const fg_spec *spec, fg_tune_status st, double ms,
                       double tflops, const char *note, int work) {
    fg_tune_record rec;
    memset(&rec, 0, sizeof rec);
    rec.cls = pb->cls;
    rec.spec = *spec;
    rec.status = st;
    rec.ms = ms;
    rec.tflops = tflops;
    sweep_note(rec.note, sizeof rec.note, "%s", note);
    fg_error err;
    fg_error_clear(&err);
    if (tunedb_add(R->db, &rec, &err) != FG_OK) {
        sweep_print(R, SWEEP_ERR, "cannot record a result: %s", err.msg);
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
    sweep_progress(R, pb, spec, st, ms);
    return 0;
}

/* Saves the database when records were added since the last save. Returns 0, or -1 after printing why. */
static int sweep_save(sweep_run *R) {
    if (!R->dirty) return 0;
    fg_error err;
    fg_error_clear(&err);
    if (tunedb_save(R->db_path, R->db, &err) != FG_OK) {
        sweep_print(R, SWEEP_ERR, "%s", err.msg);
        return -1;
    }
    R->dirty = 0;
    return 0;
}

/* What a timing launches: one candidate through the tool's sweep_bench. */
typedef struct sweep_launch {
    const sweep_bench *bench; /* the tool's side */
    sweep_run *R;             /* the sweep */
    const fg_spec *spec;      /* the candidate */
} sweep_launch;

/* launch_fn of the timing: bench->launch. */
static fg_status sweep_launch_one(void *user, int i, fg_error *err) {
    const sweep_launch *t = user;
    return t->bench->launch(t->bench->user, t->R, t->spec, i, err);
}

/* The timing of a checked candidate: 3 warm-up and --iters launches, the median into *ms and the TFLOP/s
 * at `flops` a launch into *tflops, *st ok. The launches' or the events' failure otherwise. */
static fg_status sweep_time(sweep_run *R, const sweep_bench *bench, const fg_spec *spec, double flops,
                           fg_tune_status *st, double *ms, double *tflops, fg_error *err) {
    launch_times t;
    sweep_launch tl = {bench, R, spec};
    fg_status s = time_launches(R->cu, R->stream, 3, R->opt->iters, sweep_launch_one, &tl, &t, err);
    if (s != FG_OK) return s;
    if (!(t.median > 0))
        return fg_fail(err, FG_ERR_CUDA, "the CUDA events measured no time (median %g ms)", t.median);
    *st = FG_TUNE_OK;
    *ms = t.median;
    *tflops = flops / (t.median * 1e-3) / 1e12;
    return FG_OK;
}

/* The current problem on the GPU: set up at its first candidate that runs. */
typedef struct sweep_gpu {
    int ready;        /* bench->prepare succeeded; bench->release is due */
    double flops;     /* per launch, for the TFLOP/s */
    char l2note[128]; /* how the tensors stand to L2, for the notes; "" when they are far larger */
} sweep_gpu;

/* Runs candidate spec on the current problem: bench->check (one launch on poisoned outputs and the check
 * of its output), then, when it passed, the timing. Fills *st (ok or wrong), *ms, *tflops and note
 * (compile_note is the compile's). Returns FG_OK, or the failure of a launch or a driver call: the
 * candidate is then recorded as failed and the caller looks whether the context survived. */
static fg_status sweep_measure(sweep_run *R, const sweep_bench *bench, const sweep_gpu *G, const fg_spec *spec,
                              const char *compile_note, fg_tune_status *st, double *ms, double *tflops, char *note,
                              size_t n, fg_error *err) {
    fg_status s;
    char checked[FG_TUNE_NOTE_MAX];
    int pass = 0;
    *st = FG_TUNE_FAILED;
    *ms = *tflops = 0;
    if ((s = bench->check(bench->user, R, spec, &pass, checked, sizeof checked, err)) != FG_OK) return s;
    if (!pass) {
        *st = FG_TUNE_WRONG;
        sweep_note(note, n, "%s", checked);
        return FG_OK;
    }
    if ((s = sweep_time(R, bench, spec, G->flops, st, ms, tflops, err)) != FG_OK) return s;
    sweep_note(note, n, "%s; %s%s%s", checked, compile_note, G->l2note[0] ? "; " : "", G->l2note);
    return FG_OK;
}

/* Runs the items [first, end) of problem pi: records the refused ones, waits for each compile, then
 * records the outcome of each candidate that compiled. Stops before a candidate once a signal came or
 * the budget ran out (SWEEP_STOPPED; R->budget_hit tells which). Returns SWEEP_GO_ON, SWEEP_STOPPED or
 * SWEEP_FATAL (printed). */
static int sweep_problem(sweep_run *R, sweep_pool *pool, const sweep_bench *bench, int pi, int first, int end) {
    const fg_tune_problem *pb = &R->space->problems[pi];
    sweep_gpu G;
    memset(&G, 0, sizeof G);

    int pending = 0, refused = 0;
    for (int i = first; i < end; i++) {
        pending += R->items[i].action != PLAN_SKIP;
        refused += R->items[i].action == PLAN_REFUSE;
    }
    if (pending == 0) return SWEEP_GO_ON;
    R->best_ms = 0;
    for (int i = 0; i < R->db->count; i++) { /* a resumed problem's best so far */
        const fg_tune_record *r = &R->db->records[i];
        if (r->status == FG_TUNE_OK && sweep_same_class(&r->cls, &pb->cls) && (R->best_ms <= 0 || r->ms < R->best_ms)) {
            R->best_ms = r->ms;
            R->best = r->spec;
        }
    }
    char what[128];
    sweep_problem_text(pb, what, sizeof what);
    sweep_print(R, SWEEP_INFO, "problem %d/%d (%s:%d): %s: %d candidates to record (%d refused), %d already measured",
               pi + 1, R->space->count, R->space_path, pb->line, what, pending, refused, pb->ncands - pending);

    int result = SWEEP_GO_ON;
    for (int i = first; i < end && result == SWEEP_GO_ON; i++) {
        sweep_item *it = &R->items[i];
        if (it->action == PLAN_SKIP) continue;
        if (sweep_signal) {
            result = SWEEP_STOPPED;
            break;
        }
        if (R->opt->budget > 0 && now_seconds() - R->t0 >= R->opt->budget) {
            R->budget_hit = 1;
            result = SWEEP_STOPPED;
            break;
        }
        const fg_spec *spec = &pb->cands[it->cand].spec;
        if (it->action == PLAN_REFUSE) {
            if (sweep_record(R, pb, spec, FG_TUNE_REFUSED, 0, 0, it->note, 0) != 0) result = SWEEP_FATAL;
            continue;
        }
        const sweep_item *built = plan_wait_compiled(pool, it);
        if (!built) {
            result = SWEEP_STOPPED;
            break;
        }
        /* The worker wrote compiled and note before the lock plan_wait_compiled took; they stay so. */
        if (built->compiled != FG_TUNE_OK) {
            if (sweep_record(R, pb, spec, built->compiled, 0, 0, built->note, 1) != 0) result = SWEEP_FATAL;
            continue;
        }
        if (!G.ready) {
            if (bench->prepare(bench->user, R, pi, &G.flops, G.l2note, sizeof G.l2note) != 0) {
                result = SWEEP_FATAL;
                break;
            }
            G.ready = 1;
        }
        fg_tune_status st;
        double ms, tflops;
        char note[FG_TUNE_NOTE_MAX];
        fg_error err;
        fg_error_clear(&err);
        if (sweep_measure(R, bench, &G, spec, built->note, &st, &ms, &tflops, note, sizeof note, &err) == FG_OK) {
            if (sweep_record(R, pb, spec, st, ms, tflops, note, 1) != 0) result = SWEEP_FATAL;
            continue;
        }
        /* A launch the driver refuses (resources) leaves the context usable; a kernel that faulted
         * poisons it for the rest of the process, and every later candidate would fail too. */
        int alive = R->cu->cuCtxSynchronize() == CUDA_SUCCESS;
        if (sweep_record(R, pb, spec, FG_TUNE_FAILED, 0, 0, err.msg, 1) != 0) {
            result = SWEEP_FATAL;
        } else if (!alive) {
            char tiles[48];
            sweep_tiles_text(spec, tiles, sizeof tiles);
            sweep_print(R, SWEEP_ERR, "the CUDA context is unusable after candidate %s of problem %d failed (%s); it is "
                       "recorded as failed, so running the same command again goes on after it", tiles, pi + 1, err.msg);
            result = SWEEP_FATAL;
        }
    }
    if (G.ready) bench->release(bench->user, R);
    return result;
}

/* sweep_print_table: see sweep.h. */
int sweep_print_table(const fg_tune_space *space, const fg_tunedb *db) {
    fg_tunedb sub;
    tunedb_init(&sub, &db->id);
    fg_error err;
    fg_error_clear(&err);
    int rc = 0;
    for (int i = 0; i < db->count && rc == 0; i++) {
        const fg_tune_record *r = &db->records[i];
        for (int k = 0; k < space->count; k++) {
            const fg_tune_class *c = &space->problems[k].cls;
            if (sweep_same_class(&r->cls, c)) {
                if (tunedb_add(&sub, r, &err) != FG_OK) rc = -1;
                break;
            }
        }
    }
    if (rc == 0 && tunedb_format_table(&sub, stdout, &err) != FG_OK) rc = -1;
    if (rc != 0) sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
    tunedb_free(&sub);
    return rc;
}

/* Says how the sweep ended and, unless it was interrupted or failed, prints the table of this space's
 * problems. Returns the exit status: 0 when it ran to the end or to the budget, else 1. */
static int sweep_finish(sweep_run *R, int outcome) {
    if (R->line_open) {
        fputc('\n', stderr);
        R->line_open = 0;
    }
    int n = R->done;
    const char *s = n == 1 ? "" : "s";
    if (outcome == SWEEP_FATAL) {
        if (R->dirty) sweep_print(NULL, SWEEP_ERR, "stopped; the %d candidate%s measured could not be saved", n, s);
        else if (n == 0) sweep_print(NULL, SWEEP_ERR, "stopped before any candidate was recorded");
        else sweep_print(NULL, SWEEP_ERR, "stopped; %d candidate%s measured and saved in %s; run the same command to resume", n, s,
                 R->db_path);
        return SWEEP_EXIT_FAIL;
    }
    if (outcome == SWEEP_STOPPED && !R->budget_hit) {
        sweep_print(NULL, SWEEP_ERR, "interrupted; %d candidate%s measured, resume with the same command", n, s);
        return SWEEP_EXIT_FAIL;
    }
    if (R->budget_hit)
        sweep_print(R, SWEEP_INFO, "budget of %.0f s reached: %d of %d candidates left; run the same command to resume",
                   R->opt->budget, R->planned - n, R->planned);
    sweep_print(R, SWEEP_INFO, "%d candidate%s recorded in %.0f s (%d ok, %d wrong, %d failed, %d spilled, %d refused); "
               "database %s", n, s, now_seconds() - R->t0, R->added[FG_TUNE_OK], R->added[FG_TUNE_WRONG],
               R->added[FG_TUNE_FAILED], R->added[FG_TUNE_SPILLED], R->added[FG_TUNE_REFUSED], R->db_path);
    if (R->opt->nshards > 0) return SWEEP_EXIT_OK; /* a worker: the parent merges and prints the table */
    return sweep_print_table(R->space, R->db) == 0 ? SWEEP_EXIT_OK : SWEEP_EXIT_FAIL;
}

/* sweep_space: see sweep.h. */
int sweep_space(const char *space_path, const sweep_opts *o, const sweep_bench *bench) {
    fg_error err;
    fg_error_clear(&err);
    fg_tune_space space;
    memset(&space, 0, sizeof space);
    fg_tunedb db;
    memset(&db, 0, sizeof db);
    sweep_pool pool;
    memset(&pool, 0, sizeof pool);
    sweep_run R;
    memset(&R, 0, sizeof R);
    pthread_t *threads = NULL;
    int nthreads = 0, pool_init = 0, pushed = 0, retained = 0, handlers = 0, status = SWEEP_EXIT_FAIL, lock_fd = -1;
    fg_context *ctx = NULL;
    const fg_cuda_api *cu = NULL;
    CUcontext pctx = NULL, popped;
    struct sigaction old_int, old_term;

    /* The space first, for an arch every GPU-less machine can validate: a bad file is reported even
     * without a GPU. It is loaded again below for the GPU's own arch when that differs. */
    if (space_load(space_path, 90, 1, &space, &err) != FG_OK) {
        sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
        return SWEEP_EXIT_FAIL;
    }
    if (bench->check_shapes(bench->user, space_path, &space) != 0) goto done;
    /* The program's main turns the CUDA compute cache off (CUDA_CACHE_DISABLE=1): a cached NVRTC compile
     * has no ptxas report, and a spilling candidate would pass for a clean one. */
    ctx = bench->open_context(bench->user, o->device); /* with no tuning database: the sweep must not trust the file it rewrites */
    if (!ctx) goto done;
    cu = ctx->cu;
    if (ctx->arch != 90) {
        space_free(&space);
        if (space_load(space_path, ctx->arch, 0, &space, &err) != FG_OK) {
            sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
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
    if (shard_identity(ctx, &id, &err) != FG_OK) {
        sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
        goto done;
    }
    char path[PATH_MAX];
    fg_disk_cache cache;
    fg_error cerr;
    fg_error_clear(&cerr);
    int have_cache = cache_open(&cache, NULL, &cerr) == FG_OK;
    if (o->db) {
        if (snprintf(path, sizeof path, "%s", o->db) >= (int)sizeof path) {
            sweep_print(NULL, SWEEP_ERR, "--db path is longer than %d bytes", (int)sizeof path - 1);
            goto done;
        }
    } else if (!have_cache) {
        sweep_print(NULL, SWEEP_ERR, "the tuning database lives in the disk cache directory, which is unusable (%s); give --db FILE",
            cerr.msg);
        goto done;
    } else if (tunedb_path(cache.dir, &id, path, sizeof path, &err) != FG_OK) {
        sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
        goto done;
    }
    if (o->nshards == 0) { /* a worker writes its own part; the parent holds the lock and merges */
        if ((lock_fd = shard_lock(path)) < 0) goto done;
        int merged = 0;
        if (shard_merge_parts(path, &id, &merged) != 0) goto done;
        if (merged) sweep_print(NULL, SWEEP_INFO, "merged %d records left by a multi-GPU run into %s", merged, path);
    }
    if (shard_open_db(path, &id, &db) != 0) goto done;
    int resumed_records = db.count;

    /* The plan: every (problem, candidate) in order, with what to do with it. */
    int nitems = 0;
    for (int i = 0; i < space.count; i++) nitems += space.problems[i].ncands;
    sweep_item *items = fg_calloc(nitems > 0 ? (size_t)nitems : 1, sizeof *items);
    pool.queue = fg_malloc((nitems > 0 ? (size_t)nitems : 1) * sizeof *pool.queue);
    pool.items = items;
    if (!items || !pool.queue) {
        sweep_print(NULL, SWEEP_ERR, "out of memory planning %d candidates", nitems);
        goto done;
    }
    int skipped = 0, others = 0, refused = 0, timed = 0;
    if (plan_items(&space, &db, ctx, o, items, nitems, &skipped, &others, &refused) != 0) {
        sweep_print(NULL, SWEEP_ERR, "out of memory planning %d candidates", nitems);
        goto done;
    }
    for (int k = 0; k < nitems; k++) {
        timed += items[k].action == PLAN_TIME;
        if (items[k].action == PLAN_TIME && items[k].compile_of == k) pool.queue[pool.nqueue++] = k;
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
    sweep_print(&R, SWEEP_INFO, "%s (%s, %d SMs), CUDA driver %d.%d, NVRTC %s, flashgen %s", id.device, arch, id.sm_count,
               id.driver_version / 1000, id.driver_version % 1000 / 10, id.nvrtc, id.flashgen);
    if (resumed_records) sweep_print(&R, SWEEP_INFO, "database %s: %d records, resuming", path, resumed_records);
    else sweep_print(&R, SWEEP_INFO, "database %s: new", path);
    char compiling[96] = "";
    if (pool.nqueue > 0)
        snprintf(compiling, sizeof compiling, " (%d variant%s to compile on %d thread%s)", pool.nqueue,
                 pool.nqueue == 1 ? "" : "s", jobs, jobs == 1 ? "" : "s");
    char share[96] = "";
    if (o->nshards > 1)
        snprintf(share, sizeof share, " (this worker: every %d%s problem from number %d)", o->nshards,
                 o->nshards == 2 ? "nd" : o->nshards == 3 ? "rd" : "th", o->shard + 1);
    sweep_print(&R, SWEEP_INFO, "%s: %d problem%s%s, %d candidates: %d already measured, %d for other workers, %d refused, "
               "%d to time%s", space_path, space.count, space.count == 1 ? "" : "s", share, nitems, skipped, others,
               refused, timed, compiling);
    if (R.planned == 0) {
        sweep_print(&R, SWEEP_INFO, "every candidate of %s is in the database already", space_path);
        status = o->nshards > 0 || sweep_print_table(R.space, R.db) == 0 ? SWEEP_EXIT_OK : SWEEP_EXIT_FAIL; /* workers: the parent prints */
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
        sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
        goto done;
    }
    int l2 = 0;
    if (cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ctx->device) != CUDA_SUCCESS || l2 <= 0)
        l2 = 60 << 20; /* H100/H200 class, if the driver does not say */
    R.l2_bytes = (double)l2;

    /* Ctrl-C (or a TERM from a job scheduler) finishes the current candidate, then saves. */
    sweep_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = sweep_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    if (sigaction(SIGINT, &sa, &old_int) != 0 || sigaction(SIGTERM, &sa, &old_term) != 0) {
        sweep_print(NULL, SWEEP_ERR, "cannot install the interrupt handler (%s)", strerror(errno));
        goto done;
    }
    handlers = 1;

    pool.space = &space;
    pool.disk = have_cache ? &cache : NULL;
    pool.allow_spills = o->allow_spills;
    pool.stop_signal = &sweep_signal;
    if (pthread_mutex_init(&pool.lock, NULL) != 0) {
        sweep_print(NULL, SWEEP_ERR, "cannot initialize the compile queue's lock");
        goto done;
    }
    if (pthread_cond_init(&pool.compiled, NULL) != 0) {
        pthread_mutex_destroy(&pool.lock);
        sweep_print(NULL, SWEEP_ERR, "cannot initialize the compile queue's condition variable");
        goto done;
    }
    pool_init = 1;
    if (pool.nqueue > 0) {
        threads = fg_calloc((size_t)jobs, sizeof *threads);
        int why = 0;
        if (threads) nthreads = pool_start(plan_worker, &pool, jobs, threads, &why);
        if (nthreads == 0) {
            sweep_print(NULL, SWEEP_ERR, "could not start any compile thread (%s)", strerror(threads ? why : ENOMEM));
            goto done;
        }
    }

    R.t0 = now_seconds();
    int outcome = SWEEP_GO_ON;
    for (int i = 0, first = 0; i < space.count && outcome == SWEEP_GO_ON; i++) {
        int end = first + space.problems[i].ncands;
        outcome = sweep_problem(&R, &pool, bench, i, first, end);
        if (sweep_save(&R) != 0) outcome = SWEEP_FATAL; /* after every problem, and whatever stopped it */
        first = end;
    }
    status = sweep_finish(&R, outcome);

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

