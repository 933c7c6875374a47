/* tunedb.h: the per-GPU tuning database: every candidate `flashgen tune` measured, and the winner lookup
 * that dispatch consults before the tile policy.
 *
 * One file per GPU model and software stack, named by tunedb_path (identical GPUs share it). Its
 * identity (device name, compute capability, SM count, CUDA driver version, NVRTC version, flashgen
 * version) and the format version are in its header; a file made for anything else is refused, never
 * trusted, because tile timings do not carry over between GPUs, drivers or kernel generators.
 *
 * A record is keyed by a problem class and a spec. The class is what a timing generalizes over: kernel
 * family, dtype, head_dim, mask, GQA ratio (heads_q / heads_kv), and buckets of seqlen_q, seqlen_k and
 * batch * heads_q, each the value rounded up to a power of two (tunedb_bucket). Every measured
 * candidate is kept, with its status, not only the winner: a later sweep resumes from them, and a
 * person can see why a tile lost.
 *
 * The file is Lua-table text read back through the config sandbox (core/lua_sandbox.h), one call
 * per line, sorted, so two saves of equal databases are byte-identical and a diff between sweeps reads well:
 *   tuning { format = 1, results = 2,
 *            gpu = { name = "NVIDIA H200", arch = 90, sms = 132, driver = 13000, nvrtc = "13.0",
 *                    flashgen = "0.1.0" } }
 *   result { kind = "fwd", dtype = "bf16", head_dim = 128, causal = false, gqa = 1, seqlen_q = 2048,
 *            seqlen_k = 2048, batch_heads = 128, spec = "arch=sm_90a,block_m=128,...",
 *            status = "ok", ms = 1.234, tflops = 321.5, note = "" }
 * `results` is the number of result{} calls that follow, so a file cut short at any byte is detected.
 * Writes are atomic (fg_write_file_atomic): readers see the old file or the new one. A file holds up to
 * about 50,000 records (the sandbox reads at most 16 MiB); 17,000 load in about 0.3 s. */
#ifndef FG_TUNEDB_H
#define FG_TUNEDB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "generator/spec.h"

#define FG_TUNEDB_FORMAT_VERSION 1 /* bump when the file's fields change meaning */
#define FG_TUNE_NOTE_MAX 320       /* bytes of a record's note, NUL included: room for a validation sentence */

/* What the database was made on. All fields take part in the match: a different value refuses the file. */
typedef struct fg_tune_identity {
    char device[256];   /* cuDeviceGetName, e.g. "NVIDIA H200" */
    int arch;           /* compute capability times ten (90) */
    int sm_count;       /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: a cut-down part times differently */
    int driver_version; /* cuDriverGetVersion, e.g. 13000 for CUDA 13.0 */
    char nvrtc[32];     /* compile_nvrtc_version(), e.g. "13.0": the compiler shapes the code timed */
    char flashgen[32];  /* FG_VERSION_STRING of the build that measured */
} fg_tune_identity;

/* The problem class a timing stands for. seqlen_q, seqlen_k and batch_heads are buckets (powers of two);
 * the functions below that take a class round those three up themselves, so raw problem sizes may be
 * passed as well (a value below 1 counts as 1). */
typedef struct fg_tune_class {
    fg_kind kind;        /* kernel family */
    fg_dtype dtype;      /* element type of Q, K, V */
    int head_dim;        /* d */
    int causal;          /* 0 or 1 */
    int gqa;             /* heads_q / heads_kv, >= 1 */
    int64_t seqlen_q;    /* bucket of the query length */
    int64_t seqlen_k;    /* bucket of the key length */
    int64_t batch_heads; /* bucket of batch * heads_q: how many CTA rows fill the GPU */
} fg_tune_class;

/* What happened to a candidate. */
typedef enum fg_tune_status {
    FG_TUNE_OK = 0,      /* compiled, output checked against the reference, timed */
    FG_TUNE_WRONG = 1,   /* ran, but its output disagreed with the reference: never a winner */
    FG_TUNE_FAILED = 2,  /* compile, load or launch failed */
    FG_TUNE_SPILLED = 3, /* the resource report showed local-memory spills: pruned before timing */
    FG_TUNE_REFUSED = 4  /* spec_validate refused it: the note holds the rule's sentence */
} fg_tune_status;
#define FG_TUNE_STATUS_COUNT 5

/* One measured candidate. */
typedef struct fg_tune_record {
    fg_tune_class cls;           /* the class it was timed for (buckets) */
    fg_spec spec;                /* the complete variant; kind/dtype/head_dim/causal agree with cls */
    char name[FG_SPEC_NAME_MAX]; /* spec's canonical text; filled by tunedb_add, ignored on input */
    fg_tune_status status;       /* outcome */
    double ms;                   /* median time of one launch in milliseconds; > 0 when status is ok, else 0 or any */
    double tflops;               /* achieved TFLOP/s (FA convention: causal counts half the FLOPs); 0 if not timed */
    char note[FG_TUNE_NOTE_MAX]; /* short free text: why it failed, the max error, spill bytes */
} fg_tune_record;

/* The database in memory: one identity, records sorted by class then spec name, unique per (class, spec). */
typedef struct fg_tunedb {
    fg_tune_identity id;     /* the GPU and software it belongs to */
    fg_tune_record *records; /* sorted; owned */
    int count;               /* records in use */
    int cap;                 /* records allocated */
} fg_tunedb;

/* Fills id with the given values and this build's FG_VERSION_STRING (strings are truncated to fit). */
void tunedb_identity_init(fg_tune_identity *id, const char *device, int arch, int sm_count, int driver_version,
                          const char *nvrtc);

/* Makes *db an empty database for identity id (copied). Owns nothing yet; free with tunedb_free. */
void tunedb_init(fg_tunedb *db, const fg_tune_identity *id);

/* Frees the records and empties *db (the identity is kept); harmless on an empty or freed database. */
void tunedb_free(fg_tunedb *db);

/* v rounded up to the next power of two; values below 1 give 1, values above 2^62 give 2^62. */
int64_t tunedb_bucket(int64_t v);

/* Writes "<dir>/tune-<device>-sm<arch>-<sms>sm.lua" into buf (n bytes), where <device> is the device
 * name with every run of characters other than letters, digits, '.' and '_' turned into one '-'
 * ("NVIDIA H200" -> "NVIDIA-H200"), cut to 64 bytes. FG_ERR_INVALID_ARGUMENT when buf is too small or
 * dir is empty; the path is NOT created. */
fg_status tunedb_path(const char *dir, const fg_tune_identity *id, char *buf, size_t n, fg_error *err);

/* Reads the database at path into *db (overwritten, not freed: pass an empty or freed one).
 * expected: the identity of the GPU the caller runs on; every identity field and the format version must
 * match, else the file is refused. NULL accepts any identity (for `flashgen tune --show FILE`).
 * Errors, after which *db is an empty database for `expected` (or a zeroed one when it is NULL), so a
 * sweep can start afresh:
 *   FG_ERR_NOT_FOUND  no file at path;
 *   FG_ERR_FORMAT     another format version, GPU, driver, NVRTC or flashgen version (the sentence
 *                     lists every field that differs, with both values), or a corrupt file: a syntax
 *                     error, a wrong-typed or unknown field, bad spec text, a value out of range, a
 *                     duplicate record, a missing header, fewer or more results than the header says
 *                     (truncation); "path:line: ..." wherever the line is known;
 *   FG_ERR_IO         the file exists but cannot be read;
 *   FG_ERR_NO_MEMORY  host memory ran out.
 * The caller logs the sentence and ignores the file; nothing half-read is ever returned. */
fg_status tunedb_load(const char *path, const fg_tune_identity *expected, fg_tunedb *db, fg_error *err);

/* Writes db to path atomically (temporary file, fsync, rename; mode 0600) in the sorted, deterministic
 * text form above. The directory must exist. FG_ERR_IO naming the path, FG_ERR_NO_MEMORY. */
fg_status tunedb_save(const char *path, const fg_tunedb *db, fg_error *err);

/* Adds a copy of *rec (its class buckets rounded, its name computed, its note truncated to fit),
 * replacing the record with the same class and spec if there is one. FG_ERR_INVALID_ARGUMENT, with a
 * sentence, when the record is inconsistent: a spec with unset tiles, a spec whose kind, dtype,
 * head_dim or causal differ from the class, or whose arch is not the database's; gqa or head_dim below 1;
 * an unknown status; ms or tflops negative or not finite; an ok record without a positive time.
 * FG_ERR_NO_MEMORY when the array cannot grow. On failure db is unchanged. */
fg_status tunedb_add(fg_tunedb *db, const fg_tune_record *rec, fg_error *err);

/* 1 when db holds a record for (cls bucketed, spec) with any status, else 0: what a resumed sweep skips. */
int tunedb_has(const fg_tunedb *db, const fg_tune_class *cls, const fg_spec *spec);

/* The tuned variant for a problem. Only records with the same kind, dtype, head_dim, causal and gqa as
 * the query apply; among their buckets (seqlen_q, seqlen_k, batch_heads) that hold at least one ok
 * record, the nearest one to the query's buckets by the sum of |log2 differences| (ties: the smaller
 * bucket, comparing seqlen_q, then seqlen_k, then batch_heads); in it the ok record with the smallest
 * ms (ties: the smaller spec name). Records of other statuses never win.
 * On FG_OK *spec (and *rec, if not NULL) receive copies, and why (if not NULL; nwhy bytes) says
 * "tuned: bucket sq 4096 sk 4096 bh 64, 1.23 ms, 12 candidates measured", naming the query's own buckets
 * too when a neighbour was used. FG_ERR_NOT_FOUND when nothing applies (db NULL or empty, no record of
 * the query's kind/dtype/head_dim/mask/gqa, or none of them ok); why then says which. A linear scan: cache the
 * answer per class on a hot path. */
fg_status tunedb_best(const fg_tunedb *db, const fg_tune_class *query, fg_spec *spec, fg_tune_record *rec,
                      char *why, size_t nwhy);
/* The same among the records whose spec has arch_accel == accel (on Hopper: 1 the sm_90a wgmma family,
 * 0 the mma.sync family at sm_90); accel -1 takes every record, as tunedb_best does. */
fg_status tunedb_best_for(const fg_tunedb *db, const fg_tune_class *query, int accel, fg_spec *spec,
                          fg_tune_record *rec, char *why, size_t nwhy);

/* Prints db as a table for `flashgen tune --show`: the identity, then per class a heading (with the
 * winner's speed against the built-in tile policy's default when both were timed) and its candidates
 * (ok ones fastest first, then the others), the winner marked '*', the default 'd'. FG_ERR_IO when
 * writing to out fails, FG_ERR_NO_MEMORY. */
fg_status tunedb_format_table(const fg_tunedb *db, FILE *out, fg_error *err);

/* The same records as CSV (`flashgen tune --show --csv`, read by bench/tune_plot.py): a header line,
 * then one line per record in the table's order; dispatch and default are 0/1, the note is quoted. */
fg_status tunedb_format_csv(const fg_tunedb *db, FILE *out, fg_error *err);

/* "ok", "wrong", "failed", "spilled", "refused"; "unknown" for other values. */
const char *tunedb_status_name(fg_tune_status status);

/* The status named text; FG_ERR_INVALID_ARGUMENT listing the names otherwise. */
fg_status tunedb_status_parse(const char *text, fg_tune_status *out, fg_error *err);

/* ---- reading host-function arguments in Lua (shared by tunedb.c and space.c) ----
 * These run inside host functions called from sandboxed Lua and report by raising Lua errors, which the
 * sandbox turns into "file:line: fn: message" at the line of the call. */
struct lua_State;

/* Reads the value at idx as an integer in [lo, hi]; `field` and `pos` (1-based list position, 0 for a
 * scalar) name it in messages. Raises on another type or a value out of range. */
long long tunedb_lua_int(struct lua_State *L, int idx, const char *fn, const char *field, int pos, long long lo,
                         long long hi);

/* Reads the value at idx as a boolean (true/false, or 0/1); raises otherwise. */
int tunedb_lua_bool(struct lua_State *L, int idx, const char *fn, const char *field, int pos);

/* Reads the value at idx as a string of at most maxlen bytes (no embedded NUL); raises otherwise. The
 * pointer stays valid while the value is on the stack. */
const char *tunedb_lua_string(struct lua_State *L, int idx, const char *fn, const char *field, int pos,
                              size_t maxlen);

/* ---- shared by tunedb.c, tunedb_file.c and tunedb_show.c ---- */

/* Total order over (bucketed) classes; the field order is the file's sort order. */
int tunedb_class_cmp(const fg_tune_class *a, const fg_tune_class *b);
/* The name a class's kind has in the file and the tables: "fwd", "bwd" or "serve". */
const char *tunedb_kind_name(fg_kind k);
/* "fwd bf16 head_dim 128 causal gqa 1" (family only) or with " sq 2048 sk 2048 bh 128" (buckets too). */
void tunedb_class_text(const fg_tune_class *c, int buckets, char *buf, size_t n);

#endif
