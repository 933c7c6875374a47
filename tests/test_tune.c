/* test_tune.c: the tuning database and tuning spaces (runtime/tunedb.c, autotune/space.c). CPU only.
 *
 * Database: a save/load round trip gives equal records and a byte-identical second save; a file made
 * for another GPU, driver, NVRTC or flashgen version, or in another format version, is refused with a
 * sentence naming each difference; a file cut at any byte, a syntax error, a wrong-typed field, bad spec
 * text, a duplicate, a record before the header and a wrong result count are refused with file:line
 * where a line exists; buckets round up to powers of two; the winner comes from the nearest tuned bucket
 * of the same dtype/head_dim/mask/gqa and is never a record that is not ok; a reloaded database
 * answers tunedb_has (resume). Spaces: the products, the bucketing, refused candidates with the rule's
 * sentence, the errors with file:line, and the shipped configs/tune_fwd.lua. Files live in a mkdtemp
 * directory under /tmp, removed afterwards. Run from the repository root (configs/tune_fwd.lua). */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cache.h"
#include "autotune/space.h"
#include "runtime/tunedb.h"
#include "tests/test_util.h"

static char g_root[64]; /* this test's scratch directory */

static void scratch_init(void) { test_scratch_make(g_root, sizeof g_root, "fg-test-tune"); }

static void scratch_fini(void) { test_scratch_remove(g_root, "fg-test-tune"); }

TestSuite(tunedb, .init = scratch_init, .fini = scratch_fini, .timeout = 60);
TestSuite(space, .init = scratch_init, .fini = scratch_fini, .timeout = 30);

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

/* ---- spaces ---- */

/* The shipped FP8 space: e4m3 problems with bf16 output on sm_90 (refused, with the rule, on sm_80). It is
 * an mma.sync space: loaded for a Hopper GPU's sm_90a target, as `flashgen tune` does, its candidates are
 * still sm_90 specs (the wgmma family has no FP8 kernel). */
Test(space, shipped_tune_fwd_fp8_loads) {
    fg_tune_space sp;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(space_load("configs/tune_fwd_fp8.lua", 90, 0, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.count, 12);
    const int refused_sm90 = sp.refused;
    for (int i = 0; i < sp.count; i++) {
        const fg_tune_problem *p = &sp.problems[i];
        cr_assert_eq(p->cls.dtype, FG_DTYPE_E4M3);
        cr_assert_lt(p->nrefused, p->ncands, "problem %d: every candidate refused on sm_90", i);
        for (int k = 0; k < p->ncands; k++)
            cr_assert_eq(p->cands[k].spec.out_dtype, FG_DTYPE_BF16);
    }
    space_free(&sp);
    cr_assert_eq(space_load("configs/tune_fwd_fp8.lua", 80, 0, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.refused, sp.total, "sm_80 has no FP8: every candidate is refused");
    cr_assert_not_null(strstr(sp.problems[0].cands[0].why, "sm_89"), "%s", sp.problems[0].cands[0].why);
    space_free(&sp);
    cr_assert_eq(space_load("configs/tune_fwd_fp8.lua", 90, 1, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.refused, refused_sm90, "the same candidates as for sm_90");
    for (int i = 0; i < sp.count; i++)
        for (int k = 0; k < sp.problems[i].ncands; k++)
            cr_assert(sp.problems[i].cands[k].spec.arch == 90 && sp.problems[i].cands[k].spec.arch_accel == 0);
    space_free(&sp);
}

static const char test_space[] =
    "-- a small space\n"
    "space { dtype = \"bf16\", head_dim = {64, 128}, causal = {false, true}, seqlen_q = 1000, batch_heads = 96,\n"
    "        block_m = {64, 128}, block_n = {64, 64}, warps = {4, 8}, stages = 2 }\n"
    "space { dtype = \"fp16\", head_dim = 64, gqa = 4, seqlen_q = 512, seqlen_k = {512, 4096}, batch_heads = 32,\n"
    "        block_m = 128, block_n = 32, warps = 4, stages = {2, 3} }\n";

Test(space, products_buckets_and_refusals) {
    fg_tune_space sp;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(space_load_string("s.lua", test_space, strlen(test_space), 90, 0, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.count, 6);
    cr_assert_eq(sp.total, 4 * 4 + 2 * 2, "block_n {64, 64} is one value: %d candidates", sp.total);
    /* First call: head_dim-major, causal fastest; sizes kept as given, classes bucketed. */
    const fg_tune_problem *p = &sp.problems[0];
    cr_assert_eq(p->cls.head_dim, 64);
    cr_assert_eq(p->cls.causal, 0);
    cr_assert_eq(sp.problems[1].cls.causal, 1);
    cr_assert_eq(sp.problems[2].cls.head_dim, 128);
    cr_assert(p->seqlen_q == 1000 && p->seqlen_k == 1000 && p->batch_heads == 96);
    cr_assert(p->cls.seqlen_q == 1024 && p->cls.seqlen_k == 1024 && p->cls.batch_heads == 128);
    cr_assert_eq(p->cls.gqa, 1);
    cr_assert_eq(p->line, 2);
    cr_assert_eq(p->ncands, 4);
    /* 64 x 8 warps is refused (each warp owns 16 or 32 rows); at head_dim 128, 128 x 64 on 4 warps is
     * accepted: its S does not fit beside O, so it runs in 32-key steps (spec_fwd_sub_n). */
    cr_assert_eq(sp.problems[0].nrefused, 1);
    cr_assert_eq(sp.problems[2].nrefused, 1);
    cr_assert_eq(sp.refused, 1 + 1 + 1 + 1);
    const fg_tune_candidate *c = &p->cands[1]; /* block_m 64, block_n 64, warps 8 */
    cr_assert(c->spec.block_m == 64 && c->spec.warps == 8 && c->spec.arch == 90 && c->spec.arch_accel == 0);
    cr_assert_eq(c->status, FG_ERR_UNSUPPORTED);
    cr_assert(strstr(c->why, "block_m 64 with 8 warps is not supported") != NULL, "%s", c->why);
    cr_assert_eq(p->cands[0].status, FG_OK);
    cr_assert_str_eq(p->cands[0].why, "");
    cr_assert(sp.problems[2].cands[2].spec.block_m == 128 && sp.problems[2].cands[2].spec.warps == 4);
    cr_assert_eq(sp.problems[2].cands[2].status, FG_OK, "%s", sp.problems[2].cands[2].why);
    /* Second call: seqlen_k given, so the product of the two lists. */
    const fg_tune_problem *q = &sp.problems[4], *r = &sp.problems[5];
    cr_assert(q->seqlen_q == 512 && q->seqlen_k == 512 && r->seqlen_k == 4096 && r->cls.seqlen_k == 4096);
    cr_assert(q->cls.dtype == FG_DTYPE_F16 && q->cls.gqa == 4 && q->line == 4);
    cr_assert(q->ncands == 2 && q->cands[0].spec.stages == 2 && q->cands[1].spec.stages == 3);
    space_free(&sp);
    cr_assert_eq(sp.count, 0);
    cr_assert_null(sp.problems);
}

/* A space is for the mma.sync family unless it says family = "wgmma": loaded for a Hopper GPU's sm_90a
 * target (as `flashgen tune` does there) its candidates are sm_90 specs, the same as for sm_90. */
Test(space, mma_space_on_hopper_gives_sm_90_candidates) {
    fg_tune_space a, b;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(space_load_string("s.lua", test_space, strlen(test_space), 90, 0, &a, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(space_load_string("s.lua", test_space, strlen(test_space), 90, 1, &b, &err), FG_OK, "%s", err.msg);
    cr_assert(a.count == b.count && a.total == b.total && a.refused == b.refused);
    for (int i = 0; i < b.count; i++) {
        cr_assert_eq(a.problems[i].ncands, b.problems[i].ncands);
        for (int k = 0; k < b.problems[i].ncands; k++) {
            const fg_tune_candidate *ca = &a.problems[i].cands[k], *cb = &b.problems[i].cands[k];
            cr_assert(cb->spec.arch == 90 && cb->spec.arch_accel == 0, "problem %d candidate %d", i, k);
            cr_assert(spec_equal(&ca->spec, &cb->spec));
            cr_assert_eq(ca->status, cb->status);
        }
    }
    space_free(&a);
    space_free(&b);
}

/* The test space's tiles as a wgmma space: sm_90a candidates, validated by that family's rules (64 query
 * rows take 8 warps, a consumer and the producer warpgroup; 128 take 12), whatever the target's suffix. */
static const char test_space_wgmma[] =
    "space { family = \"wgmma\", dtype = \"bf16\", head_dim = {64, 128}, causal = {false, true}, seqlen_q = 1000,\n"
    "        batch_heads = 96, block_m = {64, 128}, block_n = 64, warps = {4, 8}, stages = 2 }\n"
    "space { family = \"wgmma\", dtype = \"fp16\", head_dim = 64, gqa = 4, seqlen_q = 512, seqlen_k = {512, 4096},\n"
    "        batch_heads = 32, block_m = 128, block_n = 32, warps = {4, 12}, stages = {2, 3} }\n";

Test(space, wgmma_space_gives_sm_90a_candidates) {
    for (int accel = 0; accel < 2; accel++) {
        fg_tune_space sp;
        fg_error err;
        fg_error_clear(&err);
        cr_assert_eq(space_load_string("w.lua", test_space_wgmma, strlen(test_space_wgmma), 90, accel, &sp, &err),
                     FG_OK, "%s", err.msg);
        cr_assert_eq(sp.count, 6);
        cr_assert_eq(sp.total, 4 * 4 + 2 * 4);
        for (int i = 0; i < sp.count; i++) {
            const fg_tune_problem *p = &sp.problems[i];
            for (int k = 0; k < p->ncands; k++) {
                const fg_tune_candidate *c = &p->cands[k];
                cr_assert(c->spec.arch == 90 && c->spec.arch_accel == 1, "problem %d candidate %d", i, k);
                int ok = c->spec.warps == 4 * (c->spec.block_m / 64 + 1);
                cr_assert_eq(c->status == FG_OK, ok, "problem %d candidate %d: %s", i, k, c->why);
                if (!ok)
                    cr_assert(strstr(c->why, "on sm_90a") && strstr(c->why, "warps"), "%s", c->why);
                fg_error e;
                fg_error_clear(&e);
                cr_assert_eq(spec_validate(&c->spec, &e), c->status);
            }
            /* first call: only 64 x 8 warps of four tiles; second: 128 x 12 warps, at two stage counts */
            cr_assert_eq(p->nrefused, i < 4 ? 3 : 2, "problem %d", i);
        }
        cr_assert_eq(sp.refused, 4 * 3 + 2 * 2);
        space_free(&sp);
    }
    /* Elsewhere the wgmma family has no target (sm_80a); its FP8 tiles take block_n multiples of 32 up to 256. */
    fg_tune_space sp;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(space_load_string("w.lua", test_space_wgmma, strlen(test_space_wgmma), 80, 0, &sp, &err), FG_OK,
                 "%s", err.msg);
    cr_assert_eq(sp.refused, sp.total, "sm_80: every wgmma candidate is refused");
    cr_assert_not_null(strstr(sp.problems[0].cands[0].why, "sm_80a"), "%s", sp.problems[0].cands[0].why);
    space_free(&sp);
    const char *fp8 = "space { family = \"wgmma\", dtype = \"e4m3\", head_dim = 128, seqlen_q = 2048, batch_heads = 16,\n"
                      "        block_m = 128, block_n = {64, 288, 128}, warps = 12, stages = 2 }\n";
    cr_assert_eq(space_load_string("w.lua", fp8, strlen(fp8), 90, 1, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.refused, 1, "FP8 on sm_90a: block_n 288 refused, 64 and 128 taken");
    cr_assert_not_null(strstr(sp.problems[0].cands[1].why, "block_n 288"), "%s", sp.problems[0].cands[1].why);
    space_free(&sp);
}

/* A shipped sm_90a space at path: 12 problems (head_dim 64/128/256 x seqlen 2048/8192 x causal both) of
 * dtype, whose candidates are all sm_90a specs refused exactly when spec_validate refuses them, the
 * accepted ones with a producer warpgroup plus one per 64 rows, each problem with at least one tile that
 * fits (spills are found only when compiling); on an Ampere GPU all are refused. FP8 candidates have
 * block_n a multiple of 32 up to 256 and bf16 O. */
static void check_shipped_sm90a_space(const char *path, fg_dtype dtype, int problems) {
    fg_tune_space sp;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(space_load(path, 90, 1, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.count, problems, "%s: head dims x seqlens x causal both", path);
    for (int i = 0; i < sp.count; i++) {
        const fg_tune_problem *p = &sp.problems[i];
        cr_assert_eq(p->cls.dtype, dtype);
        cr_assert_lt(p->nrefused, p->ncands, "%s problem %d: every candidate refused on sm_90a", path, i);
        for (int k = 0; k < p->ncands; k++) {
            const fg_tune_candidate *c = &p->cands[k];
            cr_assert(spec_is_wgmma(&c->spec), "problem %d candidate %d", i, k);
            fg_error e;
            fg_error_clear(&e);
            cr_assert_eq(spec_validate(&c->spec, &e), c->status);
            if (c->status == FG_OK)
                cr_assert_eq(c->spec.warps, 4 * (c->spec.block_m / 64 + 1));
            if (dtype_is_fp8(dtype)) {
                cr_assert(c->spec.block_n % 32 == 0 && c->spec.block_n <= 256);
                cr_assert_eq(c->spec.out_dtype, FG_DTYPE_BF16);
            }
        }
    }
    space_free(&sp);
    cr_assert_eq(space_load(path, 80, 0, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.refused, sp.total, "sm_80 has no sm_90a family");
    space_free(&sp);
}

/* 3 head dims x seqlen 512, 1k, 2k, 4k, 8k x both masks */
Test(space, shipped_tune_fwd_sm90a_loads) { check_shipped_sm90a_space("configs/tune_fwd_sm90a.lua", FG_DTYPE_BF16, 30); }

Test(space, shipped_tune_fwd_sm90a_fp8_loads) { /* 3 head dims x seqlen 2k, 8k x both masks */
    check_shipped_sm90a_space("configs/tune_fwd_sm90a_fp8.lua", FG_DTYPE_E4M3, 12);
}

/* Loads text as space "s.lua" for sm_90, which must fail with status and a message containing parts. */
static void expect_space_refused(const char *text, fg_status status, const char *where, const char *what) {
    fg_tune_space sp;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = space_load_string("s.lua", text, strlen(text), 90, 0, &sp, &err);
    cr_assert_eq(st, status, "status %s for <%s>: %s", fg_status_string(st), text, err.msg);
    cr_assert(strncmp(err.msg, where, strlen(where)) == 0, "message for <%s> should start with '%s': %s", text, where,
              err.msg);
    cr_assert(strstr(err.msg, what) != NULL, "message for <%s> should mention '%s': %s", text, what, err.msg);
    cr_assert_eq(sp.count, 0);
    cr_assert_null(sp.problems);
}

#define TILES "block_m = 128, block_n = 64, warps = 8, stages = 2"

Test(space, errors_name_file_line_and_field) {
    expect_space_refused("\nspace { dtype = \"bf16\", head_dim = \"128\", seqlen_q = 1024, batch_heads = 64, " TILES " }",
                         FG_ERR_CONFIG, "s.lua:2:", "field 'head_dim' must be an integer, got string");
    expect_space_refused("space { dtype = \"bf16\", head_dim = 128, batch_heads = 64, " TILES " }", FG_ERR_CONFIG,
                         "s.lua:1:", "field 'seqlen_q' is required");
    expect_space_refused("space { dtype = \"bf16\", head_dim = 128, seqlen_q = 1024, batch_heads = 64, block_m = 128 }",
                         FG_ERR_CONFIG, "s.lua:1:", "field 'block_n' is required");
    expect_space_refused("space { dtype = \"bf17\", head_dim = 128, seqlen_q = 1024, batch_heads = 64, " TILES " }",
                         FG_ERR_CONFIG, "s.lua:1:", "dtype 'bf17'");
    expect_space_refused("space { dtype = \"bf16\", head_dim = 128, seqlen_q = {}, batch_heads = 64, " TILES " }",
                         FG_ERR_CONFIG, "s.lua:1:", "empty list");
    expect_space_refused("space { dtype = \"bf16\", head_dim = 128, seqlen_q = 1024, batch_heads = 64, arch = \"sm_80\", " TILES " }",
                         FG_ERR_CONFIG, "s.lua:1:", "unknown field 'arch'");
    expect_space_refused("space { dtype = \"bf16\", head_dim = 128, gqa = 8, seqlen_q = 1024, batch_heads = 12, " TILES " }",
                         FG_ERR_CONFIG, "s.lua:1:", "batch_heads 12 is not a multiple of gqa 8");
    expect_space_refused("space { dtype = \"bf16\", head_dim = 128, seqlen_q = 1024, batch_heads = 64, " TILES " }\n"
                         "space { dtype = \"bf16\", head_dim = 128, seqlen_q = 1000, batch_heads = 60, " TILES " }",
                         FG_ERR_CONFIG, "s.lua:2:", "same class (buckets sq 1024 sk 1024 bh 64) as one listed at line 1");
    expect_space_refused("space { dtype = \"bf16\", head_dim = 128, seqlen_q = 1024 batch_heads = 64 }", FG_ERR_CONFIG,
                         "s.lua:1:", "'}' expected");
    expect_space_refused("local x = 1\n", FG_ERR_CONFIG, "s.lua", "lists no problems");
    expect_space_refused("space { family = \"tensor\", dtype = \"bf16\", head_dim = 128, seqlen_q = 1024, batch_heads = 64, "
                         TILES " }", FG_ERR_CONFIG, "s.lua:1:", "field 'family' must be \"mma\"");
    expect_space_refused("space { family = {\"mma\", \"wgmma\"}, dtype = \"bf16\", head_dim = 128, seqlen_q = 1024, "
                         "batch_heads = 64, " TILES " }", FG_ERR_CONFIG, "s.lua:1:", "field 'family' takes one value");
    expect_space_refused("local t = {}\nfor i = 1, 128 do t[i] = i * 8 end\n"
                         "space { dtype = \"bf16\", head_dim = t, seqlen_q = t, batch_heads = 64, " TILES " }",
                         FG_ERR_CONFIG, "s.lua:3:", "a space may list at most 4096");
    fg_tune_space sp;
    fg_error err;
    fg_error_clear(&err);
    const char *ok = "space { dtype = \"bf16\", head_dim = 128, seqlen_q = 1024, batch_heads = 64, " TILES " }";
    cr_assert_eq(space_load_string("s.lua", ok, strlen(ok), 75, 0, &sp, &err), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "sm_75") != NULL, "%s", err.msg);
    cr_assert_eq(space_load("/nonexistent/space.lua", 90, 0, &sp, &err), FG_ERR_IO);
}

Test(space, shipped_tune_fwd_loads_for_hopper_and_ampere) {
    static const struct {
        int arch, accel;
    } targets[] = {{90, 0}, {80, 0}, {86, 0}};
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        fg_tune_space sp;
        fg_error err;
        fg_error_clear(&err);
        cr_assert_eq(space_load("configs/tune_fwd.lua", targets[t].arch, targets[t].accel, &sp, &err), FG_OK, "%s",
                     err.msg);
        /* head_dim 64/128/256 x seqlen 512/2048/4096/8192 x bf16/fp16 x causal both; 3 x 6 x 2 x 3 tiles each. */
        cr_assert_eq(sp.count, 48, "sm_%d: %d problems", targets[t].arch, sp.count);
        cr_assert_eq(sp.total, 48 * 108);
        int refused = 0;
        for (int i = 0; i < sp.count; i++) {
            const fg_tune_problem *p = &sp.problems[i];
            cr_assert_eq(p->ncands, 108);
            cr_assert(p->cls.dtype == FG_DTYPE_BF16 || p->cls.dtype == FG_DTYPE_F16);
            cr_assert_eq(p->cls.gqa, 1);
            cr_assert_eq(p->seqlen_q, p->seqlen_k);
            /* 16k tokens x (2048 / head_dim) heads: batch * seqlen * heads * head_dim is constant. */
            cr_assert_eq((long long)p->seqlen_q * p->batch_heads * p->cls.head_dim, 16384LL * 2048,
                         "problem %d: sq %d bh %d d %d", i, p->seqlen_q, p->batch_heads, p->cls.head_dim);
            cr_assert_lt(p->nrefused, p->ncands, "sm_%d problem %d: every candidate refused", targets[t].arch, i);
            for (int k = 0; k < p->ncands; k++) {
                const fg_tune_candidate *c = &p->cands[k];
                cr_assert_eq(c->spec.arch, targets[t].arch);
                cr_assert_eq(c->status != FG_OK, c->why[0] != '\0', "a refusal carries its sentence and only a refusal");
                fg_error e;
                fg_error_clear(&e);
                cr_assert_eq(spec_validate(&c->spec, &e), c->status);
            }
            refused += p->nrefused;
        }
        cr_assert_eq(sp.refused, refused);
        cr_assert_gt(refused, 0, "block_m 64 with 8 warps is in the space and must be refused");
        space_free(&sp);
    }
}

/* kind = "bwd" spaces: the backward's mma.sync candidates (arch_accel 0 even on an 'a' target), validated by
 * the backward's rules; the shipped configs/tune_bwd.lua loads for Hopper, Ampere and the 99 KiB parts, every
 * problem keeping a candidate (but head_dim 256 on the 99 KiB parts, which have no backward tile there); wgmma
 * and FP8 backward spaces are refused with a sentence. */
Test(space, bwd_space_gives_mma_backward_candidates) {
    static const char text[] =
        "space { kind = \"bwd\", dtype = {\"bf16\", \"fp16\"}, head_dim = 128, causal = {false, true}, seqlen_q = 2048,\n"
        "        batch_heads = 128, block_m = {64, 128}, block_n = {64, 128}, warps = 8, stages = {1, 2, 3} }\n";
    fg_tune_space sp;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(space_load_string("b.lua", text, strlen(text), 90, 1, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.count, 4);
    int ok = 0;
    for (int i = 0; i < sp.count; i++) {
        const fg_tune_problem *p = &sp.problems[i];
        cr_assert_eq(p->cls.kind, FG_KIND_BWD);
        cr_assert_eq(p->ncands, 12);
        for (int k = 0; k < p->ncands; k++) {
            const fg_tune_candidate *c = &p->cands[k];
            cr_assert(c->spec.kind == FG_KIND_BWD && c->spec.arch == 90 && !c->spec.arch_accel && !c->spec.tma);
            if (c->spec.stages == 3) /* the backward streams one or two query blocks */
                cr_assert(c->status != FG_OK && strstr(c->why, "stages"), "%s", c->why);
            if (c->spec.block_m == 64 && c->spec.block_n == 128 && c->spec.stages == 2) /* the policy's d 128 tile */
                cr_assert_eq(c->status, FG_OK, "%s", c->why);
            ok += c->status == FG_OK;
        }
    }
    cr_assert_gt(ok, 0);
    space_free(&sp);
    expect_space_refused("space { kind = \"bwd\", family = \"wgmma\", dtype = \"bf16\", head_dim = 128, seqlen_q = 1024, "
                         "batch_heads = 64, " TILES " }", FG_ERR_CONFIG, "s.lua:1:", "takes family \"mma\" only");
    expect_space_refused("space { kind = \"bwd\", dtype = \"e4m3\", head_dim = 128, seqlen_q = 1024, batch_heads = 64, "
                         TILES " }", FG_ERR_CONFIG, "s.lua:1:", "takes dtype \"fp16\" or \"bf16\"");
    expect_space_refused("space { kind = \"sideways\", dtype = \"bf16\", head_dim = 128, seqlen_q = 1024, batch_heads = 64, "
                         TILES " }", FG_ERR_CONFIG, "s.lua:1:", "(\"fwd\" or \"bwd\")");
    static const int archs[] = {90, 80, 86};
    for (size_t t = 0; t < sizeof archs / sizeof archs[0]; t++) {
        cr_assert_eq(space_load("configs/tune_bwd.lua", archs[t], 0, &sp, &err), FG_OK, "%s", err.msg);
        cr_assert_eq(sp.count, 12, "head_dim 64/128/256 x seqlen 1k/4k x causal both");
        for (int i = 0; i < sp.count; i++) {
            const fg_tune_problem *p = &sp.problems[i];
            cr_assert_eq((long long)p->seqlen_q * p->batch_heads * p->cls.head_dim, 16384LL * 2048);
            if (archs[t] == 86 && p->cls.head_dim > 192) /* no backward tile fits 99 KiB there */
                cr_assert_eq(p->nrefused, p->ncands, "sm_86 problem %d (d %d)", i, p->cls.head_dim);
            else
                cr_assert_lt(p->nrefused, p->ncands, "sm_%d problem %d (d %d): every candidate refused", archs[t], i,
                             p->cls.head_dim);
        }
        space_free(&sp);
    }
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
