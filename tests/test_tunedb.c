/* test_tunedb.c: the tuning database (runtime/tunedb.c, tunedb_file.c, tunedb_show.c). CPU only.
 *
 * A save/load round trip gives equal records and a byte-identical second save; a file made
 * for another GPU, driver, NVRTC or flashgen version, or in another format version, is refused with a
 * sentence naming each difference; a file cut at any byte, a syntax error, a wrong-typed field, bad spec
 * text, a duplicate, a record before the header and a wrong result count are refused with file:line
 * where a line exists; buckets round up to powers of two; the winner comes from the nearest tuned bucket
 * of the same dtype/head_dim/mask/gqa and is never a record that is not ok; a reloaded database
 * answers tunedb_has (resume); the table and CSV views. Files live in a mkdtemp directory under /tmp,
 * removed afterwards. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cache.h"
#include "runtime/tunedb.h"
#include "tests/test_util.h"

static char g_root[64]; /* this test's scratch directory */

static void scratch_init(void) { test_scratch_make(g_root, sizeof g_root, "fg-test-tune"); }

static void scratch_fini(void) { test_scratch_remove(g_root, "fg-test-tune"); }

TestSuite(tunedb, .init = scratch_init, .fini = scratch_fini, .timeout = 60);

/* ---- helpers ---- */

/* g_root/name into buf. */
static const char *scratch_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_root, name);
    return buf;
}

static void write_text(const char *path, const char *text, size_t len) {
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

static fg_tune_identity h200(void) {
    fg_tune_identity id;
    tunedb_identity_init(&id, "NVIDIA H200", 90, 132, 13000, "13.0");
    return id;
}

static fg_tune_class klass(fg_dtype dtype, int head_dim, int causal, int gqa, int64_t sq, int64_t sk, int64_t bh) {
    fg_tune_class c = {FG_KIND_FWD, dtype, head_dim, causal, gqa, sq, sk, bh};
    return c;
}

/* A record for class c on sm_90 (the mma.sync family on Hopper) with the given tiles and outcome. */
static fg_tune_record rec(fg_tune_class c, int bm, int bn, int warps, int stages, fg_tune_status status, double ms,
                          double tflops, const char *note) {
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

static void add(fg_tunedb *db, fg_tune_record r) {
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_add(db, &r, &err), FG_OK, "tunedb_add: %s", err.msg);
}

/* A database with three classes, every status, awkward numbers and a note that needs escaping. */
static void sample_db(fg_tunedb *db) {
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

/* Field by field: the struct has padding. */
static int class_equal(const fg_tune_class *a, const fg_tune_class *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->head_dim == b->head_dim && a->causal == b->causal &&
           a->gqa == b->gqa && a->seqlen_q == b->seqlen_q && a->seqlen_k == b->seqlen_k &&
           a->batch_heads == b->batch_heads;
}

static void save(const char *path, const fg_tunedb *db) {
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_save(path, db, &err), FG_OK, "tunedb_save: %s", err.msg);
}

/* Loads path expecting failure with `status`; the message must contain every string in `parts`
 * (NULL-terminated). The database handed back must be empty and carry `expected`'s identity. */
static void expect_refused(const char *path, const fg_tune_identity *expected, fg_status status, const char *const *parts) {
    fg_tunedb db;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = tunedb_load(path, expected, &db, &err);
    cr_assert_eq(st, status, "status %s (want %s): %s", fg_status_string(st), fg_status_string(status), err.msg);
    for (int i = 0; parts[i]; i++)
        cr_assert(strstr(err.msg, parts[i]) != NULL, "message should mention '%s': %s", parts[i], err.msg);
    cr_assert_eq(db.count, 0);
    cr_assert_null(db.records);
    if (expected)
        cr_assert_str_eq(db.id.device, expected->device);
    tunedb_free(&db);
}

/* The header lines of a database file for identity fields given as Lua text, with `results` promised. */
static void header_text(char *buf, size_t n, int format, int results, const char *gpu) {
    snprintf(buf, n, "tuning {\n    format = %d, results = %d,\n    gpu = { %s },\n}\n", format, results, gpu);
}

static const char h200_gpu[] = "name = \"NVIDIA H200\", arch = 90, sms = 132, driver = 13000, nvrtc = \"13.0\", "
                               "flashgen = \"" FG_VERSION_STRING "\"";

/* A valid result line (line `n` of a file whose header has 4 lines) with one field replaced. */
static const char good_result[] =
    "result { kind = \"fwd\", dtype = \"bf16\", head_dim = 128, causal = false, gqa = 1, seqlen_q = 2048, "
    "seqlen_k = 2048, batch_heads = 128, spec = \"arch=sm_90,block_m=128,block_n=32,causal=0,dtype=bf16,"
    "head_dim=128,kind=fwd,stages=3,warps=4\", status = \"ok\", ms = 1.5, tflops = 300, note = \"\" }\n";

/* Writes a header (promising `results`) followed by `body` to path. */
static void write_db_text(const char *path, int results, const char *body) {
    char text[8192];
    header_text(text, sizeof text, 1, results, h200_gpu);
    strncat(text, body, sizeof text - strlen(text) - 1);
    write_text(path, text, strlen(text));
}

/* ---- database: round trip ---- */

Test(tunedb, round_trip_is_equal_and_resaves_byte_identical) {
    char p1[128], p2[128];
    scratch_path(p1, sizeof p1, "one.lua");
    scratch_path(p2, sizeof p2, "two.lua");
    fg_tunedb db, back;
    sample_db(&db);
    cr_assert_eq(db.count, 8);
    save(p1, &db);
    fg_tune_identity id = h200();
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_load(p1, &id, &back, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(back.count, db.count);
    cr_assert(strcmp(back.id.device, db.id.device) == 0 && back.id.arch == db.id.arch &&
                  back.id.sm_count == db.id.sm_count && back.id.driver_version == db.id.driver_version &&
                  strcmp(back.id.nvrtc, db.id.nvrtc) == 0 && strcmp(back.id.flashgen, db.id.flashgen) == 0,
              "identity differs after the round trip");
    for (int i = 0; i < db.count; i++) {
        const fg_tune_record *a = &db.records[i], *b = &back.records[i];
        cr_assert(class_equal(&a->cls, &b->cls), "record %d: class differs", i);
        cr_assert(spec_equal(&a->spec, &b->spec), "record %d: spec differs", i);
        cr_assert_str_eq(a->name, b->name);
        cr_assert_eq(a->status, b->status, "record %d", i);
        cr_assert(a->ms == b->ms, "record %d: ms %.17g became %.17g", i, a->ms, b->ms);
        cr_assert(a->tflops == b->tflops, "record %d: tflops %.17g became %.17g", i, a->tflops, b->tflops);
        cr_assert_str_eq(a->note, b->note, "record %d", i);
    }
    save(p2, &back);
    size_t n1, n2;
    char *t1 = read_text(p1, &n1), *t2 = read_text(p2, &n2);
    cr_assert_eq(n1, n2, "re-save is %zu bytes, first save %zu", n2, n1);
    cr_assert_eq(memcmp(t1, t2, n1), 0, "re-save differs from the first save");
    /* Sorted and readable: the header first, one record per line, shortest round-trip numbers. */
    cr_assert(strstr(t1, "results = 8") != NULL, "%s", t1);
    cr_assert(strstr(t1, "ms = 1.234,") != NULL, "%s", t1);
    cr_assert(strstr(t1, "ms = 0.30000000000000004,") != NULL, "%s", t1);
    cr_assert(strstr(t1, "seqlen_q = 1024, seqlen_k = 4096, batch_heads = 128") != NULL, "buckets: %s", t1);
    cr_assert(strstr(t1, "fp16") < strstr(t1, "bf16"), "records are sorted by dtype (fp16 first)");
    free(t1);
    free(t2);
    tunedb_free(&db);
    tunedb_free(&back);
}

Test(tunedb, save_is_independent_of_insertion_order) {
    char p1[128], p2[128];
    fg_tunedb db, rev;
    sample_db(&db);
    fg_tune_identity id = h200();
    tunedb_init(&rev, &id);
    for (int i = db.count - 1; i >= 0; i--)
        add(&rev, db.records[i]);
    save(scratch_path(p1, sizeof p1, "fwd.lua"), &db);
    save(scratch_path(p2, sizeof p2, "rev.lua"), &rev);
    size_t n1, n2;
    char *t1 = read_text(p1, &n1), *t2 = read_text(p2, &n2);
    cr_assert(n1 == n2 && memcmp(t1, t2, n1) == 0, "the file depends on the order records were added");
    free(t1);
    free(t2);
    tunedb_free(&db);
    tunedb_free(&rev);
}

Test(tunedb, missing_file_is_not_found) {
    char p[128];
    fg_tune_identity id = h200();
    expect_refused(scratch_path(p, sizeof p, "absent.lua"), &id, FG_ERR_NOT_FOUND,
                   (const char *[]){"absent.lua", NULL});
}

/* ---- database: files for something else ---- */

Test(tunedb, foreign_gpu_is_refused_naming_each_difference) {
    char p[128];
    fg_tunedb db;
    sample_db(&db);
    save(scratch_path(p, sizeof p, "h200.lua"), &db);
    tunedb_free(&db);
    fg_tune_identity a100;
    tunedb_identity_init(&a100, "NVIDIA A100-SXM4-80GB", 80, 108, 13000, "13.0");
    expect_refused(p, &a100, FG_ERR_FORMAT,
                   (const char *[]){p, "another GPU", "device \"NVIDIA H200\" (this GPU: \"NVIDIA A100-SXM4-80GB\")",
                                    "compute capability sm_90 (this GPU: sm_80)", "SM count 132 (this GPU: 108)", NULL});
    /* Same model, cut-down part: only the SM count differs, and only it is named. */
    fg_tune_identity cut = h200();
    cut.sm_count = 114;
    fg_tunedb d2;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_load(p, &cut, &d2, &err), FG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "SM count 132 (this GPU: 114)") != NULL, "%s", err.msg);
    cr_assert_null(strstr(err.msg, "device"), "only the SM count differs: %s", err.msg);
}

Test(tunedb, other_software_versions_are_refused) {
    char p[128];
    fg_tunedb db;
    sample_db(&db);
    snprintf(db.id.flashgen, sizeof db.id.flashgen, "0.0.9");
    save(scratch_path(p, sizeof p, "old.lua"), &db);
    fg_tune_identity id = h200();
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){p, "flashgen 0.0.9 (this build: " FG_VERSION_STRING ")", NULL});
    snprintf(db.id.flashgen, sizeof db.id.flashgen, "%s", FG_VERSION_STRING);
    db.id.driver_version = 12080;
    snprintf(db.id.nvrtc, sizeof db.id.nvrtc, "12.8");
    save(p, &db);
    expect_refused(p, &id, FG_ERR_FORMAT,
                   (const char *[]){"CUDA driver version 12080 (this GPU: 13000)", "NVRTC 12.8 (this GPU: 13.0)", NULL});
    tunedb_free(&db);
}

Test(tunedb, other_format_version_is_refused_before_its_fields) {
    char p[128], text[1024];
    /* A future format with a field this build does not know: refused for the format, not the field. */
    snprintf(text, sizeof text, "tuning {\n format = 2, results = 0, checksum = \"abc\",\n gpu = { %s },\n}\n", h200_gpu);
    write_text(scratch_path(p, sizeof p, "v2.lua"), text, strlen(text));
    fg_tune_identity id = h200();
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){p, "format 2", "reads format 1", NULL});
}

Test(tunedb, any_identity_is_accepted_when_none_is_expected) {
    char p[128];
    fg_tunedb db, back;
    sample_db(&db);
    save(scratch_path(p, sizeof p, "any.lua"), &db);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_load(p, NULL, &back, &err), FG_OK, "%s", err.msg);
    cr_assert_str_eq(back.id.device, "NVIDIA H200");
    cr_assert_eq(back.id.sm_count, 132);
    cr_assert_eq(back.count, db.count);
    tunedb_free(&db);
    tunedb_free(&back);
}

/* ---- database: corrupt files ---- */

Test(tunedb, every_truncation_is_refused) {
    char p[128], cut[128];
    fg_tunedb db;
    sample_db(&db);
    save(scratch_path(p, sizeof p, "full.lua"), &db);
    tunedb_free(&db);
    size_t len;
    char *text = read_text(p, &len);
    cr_assert_eq(text[len - 1], '\n');
    scratch_path(cut, sizeof cut, "cut.lua");
    fg_tune_identity id = h200();
    /* Every prefix that drops more than the final newline loses data and must be refused as a whole. */
    for (size_t n = 0; n + 1 < len; n++) {
        write_text(cut, text, n);
        fg_tunedb d;
        fg_error err;
        fg_error_clear(&err);
        fg_status st = tunedb_load(cut, &id, &d, &err);
        cr_assert_eq(st, FG_ERR_FORMAT, "prefix of %zu of %zu bytes: status %s: %s", n, len, fg_status_string(st), err.msg);
        cr_assert(strncmp(err.msg, cut, strlen(cut)) == 0, "prefix %zu: message should start with the path: %s", n, err.msg);
        cr_assert_eq(d.count, 0);
    }
    write_text(cut, text, len - 1);
    fg_tunedb d;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_load(cut, &id, &d, &err), FG_OK, "without its final newline the file is whole: %s", err.msg);
    cr_assert_eq(d.count, 8);
    tunedb_free(&d);
    free(text);
}

Test(tunedb, syntax_error_names_file_and_line) {
    char p[128], where[160];
    scratch_path(p, sizeof p, "syntax.lua");
    write_db_text(p, 2, "result { kind = \"fwd\" dtype = \"bf16\" }\n");
    snprintf(where, sizeof where, "%s:5:", p);
    fg_tune_identity id = h200();
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){where, NULL});
}

Test(tunedb, wrong_typed_field_names_file_line_and_field) {
    char p[128], body[2048], where[160];
    scratch_path(p, sizeof p, "types.lua");
    fg_tune_identity id = h200();
    snprintf(where, sizeof where, "%s:6:", p);
    /* Line 5 is good, line 6 has the bad field. */
    static const struct {
        const char *from, *to, *mention;
    } cases[] = {
        {"ms = 1.5", "ms = \"fast\"", "field 'ms' must be a number, got string"},
        {"head_dim = 128", "head_dim = \"128\"", "field 'head_dim' must be an integer, got string"},
        {"causal = false", "causal = \"no\"", "field 'causal' must be a boolean"},
        {"seqlen_q = 2048", "seqlen_q = 3000", "field 'seqlen_q' must be a power of two"},
        {"status = \"ok\"", "status = \"fast\"", "field 'status'"},
        {"tflops = 300", "tflops = -1", "field 'tflops' must be a finite number, not negative"},
        {"note = \"\"", "note = \"\", extra = 1", "unknown field 'extra'"},
        {"block_n=32,", "block_n=32,bogus=1,", "field 'spec': spec: unknown key 'bogus'"},
        {"arch=sm_90,", "arch=sm_80,", "targets sm_80, but this tuning database is for sm_90"},
        {"head_dim=128,kind", "head_dim=64,kind", "its head_dim differs"},
        {"status = \"ok\", ms = 1.5", "status = \"ok\", ms = 0", "status ok but no time"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char bad[1024];
        const char *at = strstr(good_result, cases[i].from);
        cr_assert_not_null(at, "case %zu: '%s' not in the template", i, cases[i].from);
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - good_result), good_result, cases[i].to,
                 at + strlen(cases[i].from));
        snprintf(body, sizeof body, "%s%s", good_result, bad);
        /* The second record must differ from the first in key, or the duplicate rule would fire first. */
        char *tile = strstr(body + strlen(good_result), "stages=3");
        if (tile)
            tile[7] = '2';
        write_db_text(p, 2, body);
        expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){where, cases[i].mention, NULL});
    }
}

Test(tunedb, structural_errors_are_refused) {
    char p[128], body[2048], where[160];
    scratch_path(p, sizeof p, "shape.lua");
    fg_tune_identity id = h200();
    /* The same (class, spec) twice. */
    snprintf(body, sizeof body, "%s%s", good_result, good_result);
    write_db_text(p, 2, body);
    snprintf(where, sizeof where, "%s:6:", p);
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){where, "appears twice", NULL});
    /* More results than promised, and fewer. */
    write_db_text(p, 0, good_result);
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){"promises 0 results but the file holds 1", NULL});
    write_db_text(p, 3, good_result);
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){"promises 3 results but the file holds 1", NULL});
    /* A result before the header; no header at all; an empty file; a header given twice. */
    write_text(p, good_result, strlen(good_result));
    snprintf(where, sizeof where, "%s:1:", p);
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){where, "header must come before", NULL});
    write_text(p, "local x = 1\n", 12);
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){"no tuning", NULL});
    write_text(p, "", 0);
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){"no tuning", NULL});
    char text[1024], twice[2048];
    header_text(text, sizeof text, 1, 0, h200_gpu);
    snprintf(twice, sizeof twice, "%s%s", text, text);
    write_text(p, twice, strlen(twice));
    snprintf(where, sizeof where, "%s:5:", p);
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){where, "header appears twice", NULL});
    /* A wrong-typed header field. */
    header_text(text, sizeof text, 1, 0, "name = \"NVIDIA H200\", arch = 90, sms = \"132\", driver = 13000, "
                                         "nvrtc = \"13.0\", flashgen = \"" FG_VERSION_STRING "\"");
    write_text(p, text, strlen(text));
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){"field 'gpu.sms' must be an integer, got string", NULL});
    /* A script that never ends is still a corrupt file, not a hang. */
    write_text(p, "while true do end\n", 18);
    expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){"instruction budget", NULL});
}

Test(tunedb, unreadable_path_is_an_io_error) {
    fg_tune_identity id = h200();
    expect_refused(g_root, &id, FG_ERR_IO, (const char *[]){g_root, NULL}); /* a directory */
}

/* ---- database: records and lookup ---- */

Test(tunedb, buckets_round_up_to_powers_of_two) {
    static const int64_t in[] = {-5, 0, 1, 2, 3, 4, 5, 1000, 1024, 1025, 4095, 4096, 4097, 16384, 100000};
    static const int64_t out[] = {1, 1, 1, 2, 4, 4, 8, 1024, 1024, 2048, 4096, 4096, 8192, 16384, 131072};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        cr_assert_eq(tunedb_bucket(in[i]), out[i], "bucket(%lld) = %lld, want %lld", (long long)in[i],
                     (long long)tunedb_bucket(in[i]), (long long)out[i]);
    cr_assert_eq(tunedb_bucket(((int64_t)1 << 62) + 1), (int64_t)1 << 62);
    cr_assert_eq(tunedb_bucket(INT64_MAX), (int64_t)1 << 62);
}

Test(tunedb, add_replaces_the_same_class_and_spec) {
    fg_tune_identity id = h200();
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_tune_class c = klass(FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128);
    add(&db, rec(c, 128, 32, 4, 3, FG_TUNE_OK, 2.0, 100, "first"));
    /* 2000 and 1500 fall in the 2048 bucket: the same class. */
    add(&db, rec(klass(FG_DTYPE_BF16, 128, 0, 1, 2000, 1500, 120), 128, 32, 4, 3, FG_TUNE_OK, 1.0, 200, "second"));
    cr_assert_eq(db.count, 1);
    cr_assert(db.records[0].ms == 1.0);
    cr_assert_str_eq(db.records[0].note, "second");
    add(&db, rec(c, 128, 64, 4, 3, FG_TUNE_OK, 3.0, 50, ""));
    cr_assert_eq(db.count, 2);
    tunedb_free(&db);
}

Test(tunedb, add_refuses_inconsistent_records) {
    fg_tune_identity id = h200();
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_tune_class c = klass(FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128);
    struct {
        fg_tune_record r;
        const char *mention;
    } cases[8];
    int n = 0;
    cases[n].r = rec(c, 128, 32, 4, 3, FG_TUNE_OK, 1, 1, "");
    cases[n].r.spec.head_dim = 64;
    cases[n++].mention = "its head_dim differs";
    cases[n].r = rec(c, 128, 32, 4, 3, FG_TUNE_OK, 1, 1, "");
    cases[n].r.spec.causal = 1;
    cases[n++].mention = "its causal differs";
    cases[n].r = rec(c, 128, 32, 4, 3, FG_TUNE_OK, 1, 1, "");
    cases[n].r.spec.arch = 80;
    cases[n].r.spec.arch_accel = 0;
    cases[n++].mention = "targets sm_80";
    cases[n].r = rec(c, 128, 0, 4, 3, FG_TUNE_OK, 1, 1, "");
    cases[n++].mention = "unset tile fields";
    cases[n].r = rec(c, 128, 32, 4, 3, FG_TUNE_OK, 0, 0, "");
    cases[n++].mention = "status ok but no time";
    cases[n].r = rec(c, 128, 32, 4, 3, FG_TUNE_WRONG, NAN, 0, "");
    cases[n++].mention = "finite";
    cases[n].r = rec(c, 128, 32, 4, 3, (fg_tune_status)9, 1, 1, "");
    cases[n++].mention = "not a tuning status";
    cases[n].r = rec(klass(FG_DTYPE_BF16, 128, 0, 0, 2048, 2048, 128), 128, 32, 4, 3, FG_TUNE_OK, 1, 1, "");
    cases[n++].mention = "gqa must be at least 1";
    for (int i = 0; i < n; i++) {
        fg_error err;
        fg_error_clear(&err);
        cr_assert_eq(tunedb_add(&db, &cases[i].r, &err), FG_ERR_INVALID_ARGUMENT, "case %d was accepted", i);
        cr_assert(strstr(err.msg, cases[i].mention) != NULL, "case %d should mention '%s': %s", i, cases[i].mention,
                  err.msg);
        cr_assert_eq(db.count, 0);
    }
    tunedb_free(&db);
}

Test(tunedb, nearest_bucket_lookup) {
    fg_tune_identity id = h200();
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_tune_class small = klass(FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128);
    fg_tune_class large = klass(FG_DTYPE_BF16, 128, 0, 1, 8192, 8192, 32);
    add(&db, rec(small, 128, 32, 4, 3, FG_TUNE_OK, 1.23, 300, ""));
    add(&db, rec(small, 128, 64, 8, 2, FG_TUNE_OK, 1.50, 250, ""));
    add(&db, rec(large, 128, 128, 8, 2, FG_TUNE_OK, 5.00, 320, ""));
    add(&db, rec(large, 128, 32, 4, 3, FG_TUNE_OK, 6.00, 280, ""));
    fg_spec s;
    fg_tune_record r;
    char why[256];
    /* Exact bucket, from raw sizes that round into it. */
    fg_tune_class q = klass(FG_DTYPE_BF16, 128, 0, 1, 2000, 2048, 100);
    cr_assert_eq(tunedb_best(&db, &q, &s, &r, why, sizeof why), FG_OK, "%s", why);
    cr_assert_eq(s.block_n, 32);
    cr_assert(r.ms == 1.23);
    cr_assert_str_eq(why, "tuned: bucket sq 2048 sk 2048 bh 128, 1.23 ms, 2 candidates measured");
    /* A neighbour: 16384/16384/32 is 2 steps from the large bucket and 6 from the small one. */
    q = klass(FG_DTYPE_BF16, 128, 0, 1, 16384, 16384, 32);
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert_eq(s.block_n, 128);
    cr_assert(strstr(why, "nearest bucket sq 8192 sk 8192 bh 32 (this problem: sq 16384 sk 16384 bh 32)") != NULL, "%s", why);
    /* 4096/4096/64 is 3 steps from both: the smaller bucket wins the tie. */
    q = klass(FG_DTYPE_BF16, 128, 0, 1, 4096, 4096, 64);
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert_eq(s.block_n, 32);
    cr_assert(strstr(why, "bucket sq 2048 sk 2048 bh 128") != NULL, "%s", why);
    /* Nothing for another head_dim, mask, gqa or dtype: buckets never bridge those (but the 16-bit types
     * bridge each other, below). */
    fg_tune_class other[] = {klass(FG_DTYPE_BF16, 64, 0, 1, 2048, 2048, 128), klass(FG_DTYPE_BF16, 128, 1, 1, 2048, 2048, 128),
                             klass(FG_DTYPE_BF16, 128, 0, 4, 2048, 2048, 128), klass(FG_DTYPE_E4M3, 128, 0, 1, 2048, 2048, 128)};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        s.block_m = -1;
        cr_assert_eq(tunedb_best(&db, &other[i], &s, NULL, why, sizeof why), FG_ERR_NOT_FOUND, "case %zu: %s", i, why);
        cr_assert(strstr(why, "has no result for") != NULL, "case %zu: %s", i, why);
        cr_assert_eq(s.block_m, -1, "case %zu: spec written on a miss", i);
    }
    cr_assert(strstr(why, "e4m3 head_dim 128") != NULL, "%s", why);
    /* fp16 with no result of its own takes bf16's winner, in its own dtype; once it has one, its own. */
    q = klass(FG_DTYPE_F16, 128, 0, 1, 2048, 2048, 128);
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.block_n == 32 && s.dtype == FG_DTYPE_F16 && s.out_dtype == FG_DTYPE_F16, "%d %d", s.block_n, s.dtype);
    cr_assert(strstr(why, "bf16's (fp16 has no result; the two run the same kernels)") != NULL, "%s", why);
    fg_tune_record br;
    cr_assert_eq(tunedb_best(&db, &q, &s, &br, why, sizeof why), FG_OK, "%s", why);
    cr_assert(br.spec.dtype == FG_DTYPE_F16 && br.cls.dtype == FG_DTYPE_F16 && strstr(br.name, "dtype=fp16") &&
                  br.ms == 1.23, "the record as it serves fp16: %s", br.name);
    fg_tune_class small16 = small;
    small16.dtype = FG_DTYPE_F16;
    add(&db, rec(small16, 128, 64, 8, 2, FG_TUNE_OK, 1.40, 260, ""));
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.block_n == 64 && s.dtype == FG_DTYPE_F16 && strstr(why, "bf16") == NULL, "%d: %s", s.block_n, why);
    cr_assert_eq(tunedb_best(NULL, &q, &s, NULL, why, sizeof why), FG_ERR_NOT_FOUND);
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, NULL, 0), FG_OK, "why may be NULL");
    tunedb_free(&db);
}

/* On Hopper a class may hold records of both families: sm_90 (mma.sync) and sm_90a (wgmma). Dispatch asks
 * for the family a call runs on (tunedb_best_for), and gets that family's fastest record even where the
 * other family's is faster; tunedb_best (accel -1) takes either. */
Test(tunedb, best_for_keeps_to_the_family_asked_for) {
    fg_tune_identity id = h200();
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_tune_class c = klass(FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128);
    fg_tune_class far = klass(FG_DTYPE_BF16, 128, 0, 1, 8192, 8192, 32);
    add(&db, rec(c, 128, 32, 4, 2, FG_TUNE_OK, 1.20, 300, ""));
    add(&db, rec(c, 128, 64, 8, 2, FG_TUNE_OK, 1.50, 250, ""));
    fg_tune_record w = rec(c, 128, 128, 12, 2, FG_TUNE_OK, 0.80, 450, "");
    w.spec.arch_accel = 1;
    add(&db, w);
    w = rec(c, 192, 128, 16, 2, FG_TUNE_WRONG, 0.50, 700, "max err 1.0");
    w.spec.arch_accel = 1;
    add(&db, w);
    w = rec(far, 128, 96, 12, 2, FG_TUNE_OK, 5.00, 400, ""); /* sm_90a only: the other bucket */
    w.spec.arch_accel = 1;
    add(&db, w);
    fg_spec s;
    fg_tune_record r;
    char why[256];
    cr_assert_eq(tunedb_best_for(&db, &c, 0, &s, &r, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.arch_accel == 0 && s.block_n == 32 && r.ms == 1.20, "sm_90: %d x %d, accel %d, %s", s.block_m,
              s.block_n, s.arch_accel, why);
    cr_assert(strstr(why, ", 2 candidates measured"), "the count is the family's: %s", why);
    cr_assert_eq(tunedb_best_for(&db, &c, 1, &s, &r, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.arch_accel == 1 && s.block_n == 128 && s.warps == 12 && r.ms == 0.80, "sm_90a: %d x %d, %s",
              s.block_m, s.block_n, why);
    cr_assert_eq(tunedb_best(&db, &c, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert_eq(s.arch_accel, 1, "without a family the fastest ok record of either wins");
    /* The far bucket has sm_90a records only: an sm_90 query there takes sm_90's nearest bucket. */
    cr_assert_eq(tunedb_best_for(&db, &far, 0, &s, &r, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.arch_accel == 0 && r.cls.seqlen_q == 2048, "%s", why);
    cr_assert_eq(tunedb_best_for(&db, &far, 1, &s, &r, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.arch_accel == 1 && r.cls.seqlen_q == 8192, "%s", why);
    /* A family with no ok record in any bucket is not tuned. */
    fg_tune_class d64 = klass(FG_DTYPE_BF16, 64, 0, 1, 2048, 2048, 256);
    add(&db, rec(d64, 128, 64, 4, 2, FG_TUNE_OK, 0.30, 500, ""));
    cr_assert_eq(tunedb_best_for(&db, &d64, 0, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert_eq(tunedb_best_for(&db, &d64, 1, &s, NULL, why, sizeof why), FG_ERR_NOT_FOUND, "%s", why);
    tunedb_free(&db);
}

/* The winner is ranked by its time predicted for the query's lengths: a tile whose blocks pad them more
 * than the bucket's lengths loses that share (160-key blocks: 1.6% at 2048 keys, 9.4% at 1024). */
Test(tunedb, winner_accounts_for_padding_at_the_query_lengths) {
    fg_tune_identity id = h200();
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_tune_class c = klass(FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128);
    add(&db, rec(c, 128, 160, 12, 2, FG_TUNE_OK, 1.000, 650, ""));
    add(&db, rec(c, 128, 128, 12, 2, FG_TUNE_OK, 1.014, 641, ""));
    fg_spec s;
    char why[256];
    fg_tune_class q = klass(FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128);
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.block_n == 160 && strstr(why, "pad") == NULL, "%d: %s", s.block_n, why);
    q = klass(FG_DTYPE_BF16, 128, 0, 1, 1024, 1024, 256); /* 1120 keys of work for 1024 with 160 */
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.block_n == 128 && strstr(why, "its 128 x 128 tiles pad this problem's lengths less"), "%d: %s",
              s.block_n, why);
    q = klass(FG_DTYPE_BF16, 128, 0, 1, 4000, 4000, 128); /* 4000: 4000 with 160 (25 blocks), 4096 with 128 */
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert_eq(s.block_n, 160, "%s", why);
    tunedb_free(&db);
}

Test(tunedb, winner_is_never_a_record_that_is_not_ok) {
    fg_tune_identity id = h200();
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_tune_class c = klass(FG_DTYPE_BF16, 64, 1, 1, 2048, 2048, 256);
    add(&db, rec(c, 128, 64, 4, 2, FG_TUNE_WRONG, 0.1, 900, "max err 1.0"));
    add(&db, rec(c, 128, 32, 4, 2, FG_TUNE_FAILED, 0.05, 0, "launch failed"));
    add(&db, rec(c, 64, 64, 4, 2, FG_TUNE_SPILLED, 0.2, 0, ""));
    add(&db, rec(c, 128, 128, 8, 2, FG_TUNE_OK, 1.0, 100, ""));
    add(&db, rec(c, 128, 64, 8, 2, FG_TUNE_OK, 0.9, 110, ""));
    fg_spec s;
    char why[256];
    cr_assert_eq(tunedb_best(&db, &c, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert(s.block_m == 128 && s.block_n == 64 && s.warps == 8, "got %dx%d x%d", s.block_m, s.block_n, s.warps);
    cr_assert(strstr(why, "5 candidates measured") != NULL, "%s", why);
    /* A nearer bucket whose candidates all failed is passed over for one with a passing candidate. */
    fg_tune_class near = klass(FG_DTYPE_BF16, 64, 1, 1, 4096, 4096, 256);
    add(&db, rec(near, 128, 64, 4, 2, FG_TUNE_WRONG, 0.1, 900, ""));
    fg_tune_class q = klass(FG_DTYPE_BF16, 64, 1, 1, 8192, 8192, 256);
    cr_assert_eq(tunedb_best(&db, &q, &s, NULL, why, sizeof why), FG_OK, "%s", why);
    cr_assert(strstr(why, "bucket sq 2048 sk 2048 bh 256") != NULL, "%s", why);
    /* Only failures: not found, and said so. */
    fg_tunedb bad;
    tunedb_init(&bad, &id);
    add(&bad, rec(c, 128, 64, 4, 2, FG_TUNE_WRONG, 0.1, 900, ""));
    add(&bad, rec(c, 128, 32, 4, 2, FG_TUNE_FAILED, 0, 0, ""));
    cr_assert_eq(tunedb_best(&bad, &c, &s, NULL, why, sizeof why), FG_ERR_NOT_FOUND);
    cr_assert(strstr(why, "2 candidates were measured") && strstr(why, "none passed"), "%s", why);
    tunedb_free(&db);
    tunedb_free(&bad);
}

Test(tunedb, resume_after_reload) {
    char p[128];
    fg_tune_identity id = h200();
    fg_tunedb db, back;
    tunedb_init(&db, &id);
    fg_tune_class c = klass(FG_DTYPE_BF16, 128, 1, 1, 8192, 8192, 32);
    fg_tune_record done1 = rec(c, 128, 128, 8, 2, FG_TUNE_OK, 5.0, 300, "");
    fg_tune_record done2 = rec(c, 64, 64, 8, 2, FG_TUNE_REFUSED, 0, 0, "refused");
    fg_tune_record pending = rec(c, 128, 64, 8, 2, FG_TUNE_OK, 4.0, 350, "");
    add(&db, done1);
    add(&db, done2);
    save(scratch_path(p, sizeof p, "partial.lua"), &db);
    tunedb_free(&db);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_load(p, &id, &back, &err), FG_OK, "%s", err.msg);
    /* Raw sizes of the same bucket find the records; another bucket or spec does not. */
    fg_tune_class raw = klass(FG_DTYPE_BF16, 128, 1, 1, 8000, 5000, 30);
    cr_assert(tunedb_has(&back, &raw, &done1.spec));
    cr_assert(tunedb_has(&back, &c, &done2.spec));
    cr_assert_not(tunedb_has(&back, &c, &pending.spec));
    fg_tune_class other = klass(FG_DTYPE_BF16, 128, 1, 1, 2048, 2048, 32);
    cr_assert_not(tunedb_has(&back, &other, &done1.spec));
    /* The resumed sweep adds the rest and saves: the winner changes to the new, faster record. */
    add(&back, pending);
    save(p, &back);
    tunedb_free(&back);
    cr_assert_eq(tunedb_load(p, &id, &back, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(back.count, 3);
    fg_spec s;
    cr_assert_eq(tunedb_best(&back, &c, &s, NULL, NULL, 0), FG_OK);
    cr_assert_eq(s.block_n, 64);
    tunedb_free(&back);
}

Test(tunedb, path_names_the_gpu) {
    fg_tune_identity id = h200();
    char buf[256];
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_path("/x/cache", &id, buf, sizeof buf, &err), FG_OK, "%s", err.msg);
    cr_assert_str_eq(buf, "/x/cache/tune-NVIDIA-H200-sm90-132sm.lua");
    cr_assert_eq(tunedb_path("/x/cache/", &id, buf, sizeof buf, &err), FG_OK);
    cr_assert_str_eq(buf, "/x/cache/tune-NVIDIA-H200-sm90-132sm.lua");
    tunedb_identity_init(&id, " NVIDIA A100-SXM4-80GB / ../x ", 80, 108, 13000, "13.0");
    cr_assert_eq(tunedb_path("d", &id, buf, sizeof buf, &err), FG_OK);
    cr_assert_str_eq(buf, "d/tune-NVIDIA-A100-SXM4-80GB-..-x-sm80-108sm.lua");
    tunedb_identity_init(&id, "", 80, 108, 13000, "13.0");
    cr_assert_eq(tunedb_path("d", &id, buf, sizeof buf, &err), FG_OK);
    cr_assert_str_eq(buf, "d/tune-unknown-sm80-108sm.lua");
    cr_assert_eq(tunedb_path("d", &id, buf, 10, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(tunedb_path("", &id, buf, sizeof buf, &err), FG_ERR_INVALID_ARGUMENT);
}

/* What fmt (tunedb_format_table or _csv) writes for db, as a string to free. */
static char *formatted(fg_status (*fmt)(const fg_tunedb *, FILE *, fg_error *), const fg_tunedb *db) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(fmt(db, f, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(fclose(f), 0);
    return text;
}

Test(tunedb, table_groups_classes_and_marks_the_winner) {
    fg_tunedb db;
    sample_db(&db);
    char *text = formatted(tunedb_format_table, &db);
    cr_assert(strstr(text, "NVIDIA H200, sm_90, 132 SMs, CUDA driver 13.0, NVRTC 13.0") != NULL, "%s", text);
    cr_assert(strstr(text, "3 classes, 8 results (4 ok)") != NULL, "%s", text);
    const char *head = strstr(text, "bf16 head_dim 128 not causal gqa 1, bucket sq 2048 sk 2048 bh 128: 4 measured, 2 ok; "
                                    "tuned 4.113x the default (0.3000 ms against 1.2340 ms)");
    cr_assert_not_null(head, "%s", text);
    /* In that class the 0.3 ms record is the winner and comes first, marked; the 1.234 ms one, the tile
     * policy's default for sm_90 head_dim 128 non-causal, follows, marked 'd'. */
    const char *win = strstr(head, "  *      128      64     8      2  ok");
    const char *second = strstr(head, "   d     128      48     4      2  ok");
    cr_assert(win && second && win < second, "%s", text);
    cr_assert(strstr(head, "refused") != NULL && strstr(head, "spilled") != NULL, "%s", text);
    /* The note's newline does not break the row. */
    cr_assert(strstr(text, "newline   tab") != NULL, "%s", text);
    free(text);
    tunedb_free(&db);
}

Test(tunedb, csv_has_a_row_per_record_and_quotes_notes) {
    fg_tunedb db;
    sample_db(&db);
    char *text = formatted(tunedb_format_csv, &db);
    int lines = 0;
    for (const char *p = text; *p; p++) lines += *p == '\n';
    cr_assert_eq(lines, 1 + db.count, "%s", text);
    cr_assert(strncmp(text, "gpu,kind,dtype,head_dim,causal,gqa,seqlen_q,seqlen_k,batch_heads,block_m,block_n,warps,"
                      "stages,status,ms,tflops,dispatch,default,note\n", 120) == 0, "%s", text);
    /* The winner of the head_dim 128 class has dispatch 1, the policy's default has default 1. */
    cr_assert_not_null(strstr(text, ",bf16,128,0,1,2048,2048,128,128,64,8,2,ok,0.3,"), "%s", text);
    cr_assert_not_null(strstr(text, ",128,48,4,2,ok,1.234,"), "%s", text);
    cr_assert_not_null(strstr(text, ",128,64,8,2,ok,0.3,0.333333,1,0,\""), "%s", text);
    cr_assert_not_null(strstr(text, "\"quote \"\" backslash"), "a quote is doubled: %s", text);
    /* The note's newline became a space inside the quoted field. */
    cr_assert_not_null(strstr(text, "newline   tab"), "%s", text);
    free(text);
    tunedb_free(&db);
}

/* Backward records go through the file like the forward's: kind "bwd" written and read back, kept apart from a
 * forward record of the same sizes, and found only by a backward query. */
Test(tunedb, backward_records_round_trip_and_stay_apart) {
    char p1[128];
    scratch_path(p1, sizeof p1, "bwd.lua");
    fg_tune_identity id = h200();
    fg_tunedb db, back;
    tunedb_init(&db, &id);
    fg_tune_class f = klass(FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128), b = f;
    b.kind = FG_KIND_BWD;
    add(&db, rec(f, 128, 48, 4, 2, FG_TUNE_OK, 1.0, 300, ""));
    add(&db, rec(b, 64, 128, 8, 2, FG_TUNE_OK, 2.0, 400, "gradients checked"));
    add(&db, rec(b, 128, 128, 8, 2, FG_TUNE_WRONG, 1.5, 500, "dq FAIL"));
    save(p1, &db);
    size_t n;
    char *text = read_text(p1, &n);
    cr_assert(strstr(text, "result { kind = \"bwd\"") != NULL, "%s", text);
    free(text);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_load(p1, &id, &back, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(back.count, 3);
    fg_spec s;
    cr_assert_eq(tunedb_best_for(&back, &b, 0, &s, NULL, NULL, 0), FG_OK);
    cr_assert(s.kind == FG_KIND_BWD && s.block_m == 64 && s.block_n == 128, "the backward's ok winner, not the wrong one");
    cr_assert_eq(tunedb_best_for(&back, &f, 0, &s, NULL, NULL, 0), FG_OK);
    cr_assert(s.kind == FG_KIND_FWD && s.block_n == 48);
    tunedb_free(&db);
    tunedb_free(&back);
}

/* kind "serve" records keep their split count (the spec's splits key) through save and load, and the fastest
 * split count of a bucket is the one tunedb_best returns. */
Test(tunedb, serve_records_keep_their_split_count) {
    fg_tunedb db, back;
    fg_tune_identity id = h200();
    tunedb_init(&db, &id);
    fg_tune_class c = klass(FG_DTYPE_BF16, 128, 0, 4, 1, 131072, 32);
    c.kind = FG_KIND_SERVE;
    const int splits[3] = {4, 12, 16};
    const double ms[3] = {0.31, 0.19, 0.22};
    for (int i = 0; i < 3; i++) {
        fg_tune_record r = rec(c, 16, 64, 4, 3, FG_TUNE_OK, ms[i], 0.1, "");
        r.spec.out_dtype = FG_DTYPE_BF16;
        r.spec.splits = splits[i];
        add(&db, r);
    }
    cr_assert_eq(db.count, 3, "records differing only in splits are distinct");
    char path[256];
    scratch_path(path, sizeof path, "serve.lua");
    save(path, &db);
    fg_error err;
    cr_assert_eq(tunedb_load(path, &id, &back, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(back.count, 3);
    fg_spec best;
    cr_assert_eq(tunedb_best(&back, &c, &best, NULL, NULL, 0), FG_OK);
    cr_assert_eq(best.kind, FG_KIND_SERVE);
    cr_assert_eq(best.splits, 12);
    size_t len;
    char *text = read_text(path, &len);
    cr_assert(strstr(text, "kind = \"serve\"") && strstr(text, "kind=serve,splits=12,stages=3"), "%s", text);
    free(text);
    tunedb_free(&db);
    tunedb_free(&back);
}
