/* space.h: tuning spaces (configs/tune_*.lua): which problem classes `flashgen tune` times, on which
 * problem sizes, and which candidate tiles it tries for each.
 *
 * A space is a Lua file run in the config sandbox with one host function, called any number of times:
 *   space { kind = "fwd",                       -- optional, default "fwd"; "bwd": the backward's mma.sync
 *                                               -- tiles (fp16/bf16, family "mma"; the deterministic mode
 *                                               -- and the sm_90a backward keep the runtime's choice)
 *           dtype = "bf16", head_dim = {64, 128},
 *           causal = {false, true},             -- optional, default false
 *           gqa = 1,                            -- optional, default 1: heads_q / heads_kv
 *           seqlen_q = {2048, 8192},            -- problem sizes to time
 *           seqlen_k = 8192,                    -- optional: absent pairs each seqlen_q with itself
 *           batch_heads = 128,                  -- batch * heads_q, a multiple of gqa
 *           block_m = {64, 128}, block_n = {32, 64, 128}, warps = {4, 8}, stages = {2, 3} }
 * kind = "serve" times the serving forward (fg_attention_fwd_varlen) on a dense cache of seqlen_k keys with
 * seqlen_q queries a sequence, and takes one more candidate field, required there and only there:
 *           splits = {1, 2, 4, 8, 16}       -- the key splits (the spec's splits: a launch choice)
 * Every field is a scalar or a list. The class fields (dtype, head_dim, causal, gqa, seqlen_q/seqlen_k,
 * batch_heads) give the cartesian product of problems; the candidate fields (block_m, block_n, warps,
 * stages; all four required) give the cartesian product of candidates tried on each problem. Each
 * problem's class is its sizes bucketed (tunedb_bucket): two problems with the same class are an error,
 * since their timings would land in one database slot. Repeated list values are dropped.
 * The arch is not in the file: the caller gives the GPU's, so one space serves every GPU.
 * Each candidate goes through spec_validate: refused ones are kept, marked with the rule's status and
 * sentence, so the sweep can record them (status "refused") next to the timed ones. */
#ifndef FG_SPACE_H
#define FG_SPACE_H

#include "generator/spec.h"
#include "runtime/tunedb.h"

#define FG_SPACE_MAX_PROBLEMS 4096     /* most problems (classes) one space may list */
#define FG_SPACE_MAX_CANDIDATES 65536  /* most (problem, candidate) pairs one space may list */

/* One candidate of one problem. */
typedef struct fg_tune_candidate {
    fg_spec spec;     /* complete: the caller's arch, the problem's kind/dtype/head_dim/causal, the tiles */
    fg_status status; /* FG_OK, or spec_validate's status (FG_ERR_UNSUPPORTED, FG_ERR_INVALID_ARGUMENT) */
    char why[FG_TUNE_NOTE_MAX]; /* the refusing rule's sentence; "" when accepted */
} fg_tune_candidate;

/* One problem to time and its candidates. */
typedef struct fg_tune_problem {
    fg_tune_class cls;            /* the class its results are recorded under (buckets of the sizes below) */
    int seqlen_q;                 /* the query length to time */
    int seqlen_k;                 /* the key length to time */
    int batch_heads;              /* batch * heads_q to time (a multiple of cls.gqa; the timer picks the split) */
    fg_tune_candidate *cands;     /* owned; in product order (block_m, block_n, warps, stages; last fastest) */
    int ncands;                   /* number of candidates */
    int nrefused;                 /* how many of them spec_validate refused */
    int line;                     /* line of the space{} call that listed it */
} fg_tune_problem;

/* A loaded space: problems in the order listed. */
typedef struct fg_tune_space {
    fg_tune_problem *problems; /* owned */
    int count;                 /* number of problems */
    int total;                 /* candidates over all problems */
    int refused;               /* refused candidates over all problems */
} fg_tune_space;

/* Loads the space at path for target (arch, arch_accel), e.g. (90, 1) for sm_90a. On success *out owns
 * its arrays (free with space_free). On failure *out is empty and the status is FG_ERR_CONFIG with
 * "file:line: ..." for anything wrong in the file (syntax, a field's type or value, a missing field,
 * a repeated class, too many problems or candidates, no space{} call at all), FG_ERR_IO for an unreadable
 * file, FG_ERR_UNSUPPORTED for an arch flashgen has no target for, FG_ERR_NO_MEMORY for host memory. */
fg_status space_load(const char *path, int arch, int arch_accel, fg_tune_space *out, fg_error *err);

/* Same, from memory: text (len bytes) is named chunkname in messages. */
fg_status space_load_string(const char *chunkname, const char *text, size_t len, int arch, int arch_accel,
                            fg_tune_space *out, fg_error *err);

/* Frees what a successful load gave and empties sp; harmless on an empty (or failed) space. */
void space_free(fg_tune_space *sp);

#endif
