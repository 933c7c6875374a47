/* tunedb_fixtures.h: what the tuning database tests share (test_tunedb.c, test_tunedb_records.c): a scratch
 * directory per test, file helpers, an H200 identity, classes and records on sm_90, a sample database. */
#ifndef FG_TUNEDB_FIXTURES_H
#define FG_TUNEDB_FIXTURES_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cache.h"
#include "runtime/tunedb.h"
#include "tests/test_util.h"

static char g_root[64]; /* this test's scratch directory */

static inline void scratch_init(void) { test_scratch_make(g_root, sizeof g_root, "fg-test-tune"); }

static inline void scratch_fini(void) { test_scratch_remove(g_root, "fg-test-tune"); }

/* g_root/name into buf. */
static inline const char *scratch_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_root, name);
    return buf;
}

static inline void write_text(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(text, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/* The whole file (caller frees). */
static char *read_text(const char *path, size_t *len) {
    uint8_t *data = NULL;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(fg_read_file(path, &data, len, &err), FG_OK, "%s", err.msg);
    return (char *)data;
}

static inline fg_tune_identity h200(void) {
    fg_tune_identity id;
    tunedb_identity_init(&id, "NVIDIA H200", 90, 132, 13000, "13.0");
    return id;
}

static inline fg_tune_class klass(fg_dtype dtype, int head_dim, int causal, int gqa, int64_t sq, int64_t sk,
                                  int64_t bh) {
    fg_tune_class c = {FG_KIND_FWD, dtype, head_dim, causal, gqa, sq, sk, bh};
    return c;
}

/* A record for class c on sm_90 (the mma.sync family on Hopper) with the given tiles and outcome. */
static inline fg_tune_record rec(fg_tune_class c, int bm, int bn, int warps, int stages, fg_tune_status status,
                                   double ms, double tflops, const char *note) {
    fg_tune_record r;
    memset(&r, 0, sizeof r);
    r.cls = c;
    r.spec.kind = c.kind;
    r.spec.arch = 90;
    r.spec.arch_accel = 0;
    r.spec.dtype = c.dtype;
    r.spec.head_dim = c.head_dim;
    r.spec.causal = c.causal;
    r.spec.block_m = bm;
    r.spec.block_n = bn;
    r.spec.warps = warps;
    r.spec.stages = stages;
    r.status = status;
    r.ms = ms;
    r.tflops = tflops;
    snprintf(r.note, sizeof r.note, "%s", note);
    return r;
}

static inline void add(fg_tunedb *db, fg_tune_record r) {
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_add(db, &r, &err), FG_OK, "tunedb_add: %s", err.msg);
}

/* A database with three classes, every status, awkward numbers and a note that needs escaping. */
static inline void sample_db(fg_tunedb *db) {
    fg_tune_identity id = h200();
    tunedb_init(db, &id);
    fg_tune_class a = klass(FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128);
    fg_tune_class b = klass(FG_DTYPE_BF16, 128, 1, 1, 8192, 8192, 32);
    fg_tune_class c = klass(FG_DTYPE_F16, 64, 0, 4, 1000, 3000, 100); /* raw sizes: bucketed by add */
    add(db, rec(a, 128, 48, 4, 2, FG_TUNE_OK, 1.234, 321.5, "")); /* sm_90's default tile for the class */
    add(db, rec(a, 128, 64, 8, 2, FG_TUNE_OK, 0.1 + 0.2, 1.0 / 3.0, "max err 0.0039"));
    add(db, rec(a, 64, 64, 8, 2, FG_TUNE_REFUSED, 0, 0,
                "block_m 64 with 8 warps is not supported: each warp owns 16 or 32 query rows"));
    add(db, rec(a, 128, 128, 4, 2, FG_TUNE_SPILLED, 0, 0, "spills 64 bytes"));
    add(db, rec(b, 128, 128, 8, 2, FG_TUNE_OK, 12.5e-3, 1e6, "quote \" backslash \\ newline \n tab \t utf8 \xc3\xa9 end"));
    add(db, rec(b, 128, 32, 4, 3, FG_TUNE_WRONG, 0.5, 800, "max err 0.5 > 0.01"));
    add(db, rec(c, 128, 64, 4, 3, FG_TUNE_FAILED, 0, 0, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"));
    add(db, rec(c, 128, 32, 4, 2, FG_TUNE_OK, 2, 7, ""));
}

static inline void save(const char *path, const fg_tunedb *db) {
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_save(path, db, &err), FG_OK, "tunedb_save: %s", err.msg);
}

#endif
