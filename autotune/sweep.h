/* sweep.h: the tuning sweep of one GPU: every candidate of a tuning space planned, compiled in parallel,
 * checked and timed on the GPU, and recorded in the GPU's tuning database (saved after each problem, so
 * an interrupted sweep resumes). The tool supplies the GPU side of a problem (sweep_bench): its tensors
 * and the check of a candidate's output against the CPU reference, which autotune does not link. */
#ifndef FG_SWEEP_H
#define FG_SWEEP_H

#include <stddef.h>
#include "autotune/space.h"
#include "autotune/timing.h"
#include "core/error.h"
#include "runtime/cuda_api.h"
#include "runtime/runtime.h"
#include "runtime/tunedb.h"

/* Exit statuses of the sweep's entry points: the process's, as the command returns them. */
enum { SWEEP_EXIT_OK = 0, SWEEP_EXIT_FAIL = 1 };

/* Prefixes of sweep_print: errors and warnings, information. */
#define SWEEP_ERR "flashgen tune: "
#define SWEEP_INFO "tune: "

/* The options of a sweep. */
typedef struct sweep_opts {
    int device;       /* CUDA ordinal */
    double budget;    /* seconds after which no candidate starts; 0: none */
    int jobs;         /* compile threads; 0: the online CPUs */
    int iters;        /* timed launches per candidate */
    const char *db;   /* the database file, or NULL for this GPU's default */
    int shard;        /* with nshards > 0: this process is worker `shard` of a --device list, and times the */
    int nshards;      /*   problems whose index i has i % nshards == shard (the others are left out) */
    int allow_spills; /* time candidates that spill registers too (noted), instead of recording them as spilled */
} sweep_opts;

struct sweep_item;

/* A sweep in progress. */
typedef struct sweep_run {
    const char *space_path;          /* SPACE as given */
    const fg_tune_space *space;      /* its problems and candidates, for this GPU's arch */
    fg_context *ctx;                 /* candidates launch through it (rt_fwd_with_spec) */
    const fg_cuda_api *cu;           /* driver entry points */
    fg_tunedb *db;                   /* the database being filled */
    const char *db_path;             /* where it is saved */
    struct sweep_item *items;        /* every (problem, candidate) pair, problem-major */
    const sweep_opts *opt;           /* iterations and budget */
    double l2_bytes;                 /* the device's L2 cache, which timed inputs must not sit in */
    CUstream stream;                 /* every launch of the sweep goes here */
    double t0;                       /* when the sweep started (now_seconds) */
    int planned, done;               /* items to record in this run / recorded so far */
    int work_planned, work_done;     /* of those, compiled ones: they take the time, so they drive the ETA */
    int added[FG_TUNE_STATUS_COUNT]; /* records added in this run, by status */
    int dirty;                       /* records were added since the last save */
    int budget_hit;                  /* the sweep stopped because the budget ran out */
    int tty;                         /* stderr is a terminal: one updating progress line */
    char tag[24];                    /* "[gpu N] " in a worker of a multi-GPU sweep, else "" */
    int line_open;                   /* that line is on screen without its newline */
    double best_ms;                  /* the current problem's fastest ok time; 0 until there is one */
    fg_spec best;                    /* its variant */
} sweep_run;

/* The GPU side of a problem, supplied by the tool. Problems are set up one at a time: prepare before the
 * problem's first candidate that runs, release after its last. Functions that print go through
 * sweep_print(R, ...), so they never land inside the progress line. */
typedef struct sweep_bench {
    void *user; /* passed to each function */
    /* Opens a context on device for the sweep (warnings logged, no tuning database); NULL after printing
     * why ("no CUDA device: ..." when there is none). */
    fg_context *(*open_context)(void *user, int device);
    /* Checks, before any GPU work, that every problem of sp can be laid out and called: 0, or 1 after
     * printing "SPACE:line: ..." for the first that cannot. */
    int (*check_shapes)(void *user, const char *space_path, const fg_tune_space *sp);
    /* Sets up problem pi's tensors on R's current context and says so: *flops (per launch) for the TFLOP/s,
     * l2note (n bytes) how the tensors stand to L2 ("" when they are far larger). 0, or -1 after printing. */
    int (*prepare)(void *user, sweep_run *R, int pi, double *flops, char *l2note, size_t n);
    /* One launch of spec on poisoned outputs, then the check of its output: *pass, and note (n bytes) the
     * check's account (its failure when not *pass). A failed launch or driver call is returned. */
    fg_status (*check)(void *user, sweep_run *R, const fg_spec *spec, int *pass, char *note, size_t n, fg_error *err);
    /* The i-th timed launch of spec (i counts warm-up launches too). */
    fg_status (*launch)(void *user, sweep_run *R, const fg_spec *spec, int i, fg_error *err);
    /* Frees what prepare set up, after waiting for the context. */
    void (*release)(void *user, sweep_run *R);
} sweep_bench;

/* Prints one line on stderr after ending the progress line, so it never lands in the middle of one.
 * prefix: SWEEP_ERR or SWEEP_INFO; R may be NULL (no progress line, no worker tag). */
void sweep_print(sweep_run *R, const char *prefix, const char *fmt, ...) FG_PRINTF(3, 4);

/* snprintf for record notes, which are summaries: cutting one at n bytes is intended. */
void sweep_note(char *buf, size_t n, const char *fmt, ...) FG_PRINTF(3, 4);

/* Prints the records of db whose class is one of sp's problems, as `tune --show` does. 0, or -1 after
 * printing why. */
int sweep_print_table(const fg_tune_space *sp, const fg_tunedb *db);

/* `flashgen tune SPACE` on one GPU (o->device), or as worker o->shard of o->nshards. Returns the exit
 * status: 0 when every candidate is recorded or the budget ran out; 1 on an error, an interrupt, or
 * without a GPU (each printed). */
int sweep_space(const char *space_path, const sweep_opts *o, const sweep_bench *bench);

#endif
