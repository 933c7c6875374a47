/* test_tunedb.c: the tuning database's files (runtime/tunedb_file.c). CPU only.
 *
 * A save/load round trip gives equal records and a byte-identical second save; a file made
 * for another GPU, driver, NVRTC or flashgen version, or in another format version, is refused with a
 * sentence naming each difference; a file cut at any byte, a syntax error, a wrong-typed field, bad spec
 * text, a duplicate, a record before the header and a wrong result count are refused with file:line
 * where a line exists; a reloaded database answers tunedb_has (resume); a database's path names its GPU.
 * Records, lookups and views are test_tunedb_records.c's. Files live in a mkdtemp directory under /tmp,
 * removed afterwards. */
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "tests/tunedb_fixtures.h"

TestSuite(tunedb, .init = scratch_init, .fini = scratch_fini, .timeout = 60);

/* ---- helpers ---- */

/* Field by field: the struct has padding. */
static int class_equal(const fg_tune_class *a, const fg_tune_class *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->head_dim == b->head_dim && a->causal == b->causal &&
           a->gqa == b->gqa && a->seqlen_q == b->seqlen_q && a->seqlen_k == b->seqlen_k &&
           a->batch_heads == b->batch_heads;
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

/* Issue 37 item 1: the pattern functions' C loops are charged in a tuning database too (it loads when a context is
 * created): `%b` over 200,000 '(' stalled fg_context_create for 18.6 s, and a plain find of a 1M-character needle
 * in 2M characters took 25 s. Each is refused at once, naming the line. */
Test(tunedb, pattern_c_loops_are_bounded) {
    static const char *const texts[] = {"local s = string.rep('(', 200000)\nlocal _ = s:find('%b()')\n",
                                        "local s = string.rep('a', 2e6)\nlocal _ = s:find(string.rep('a', 1e6) .. 'b', 1, "
                                        "true)\n"};
    static const char *const said[] = {"could backtrack too long", "plain find"};
    char p[128], where[160];
    fg_tune_identity id = h200();
    for (int i = 0; i < 2; i++) {
        scratch_path(p, sizeof p, "slow.lua");
        write_text(p, texts[i], strlen(texts[i]));
        snprintf(where, sizeof where, "%s:2:", p);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        expect_refused(p, &id, FG_ERR_FORMAT, (const char *[]){where, said[i], NULL});
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        cr_assert_lt(s, 1.0, "refusing text %d took %.2f s", i, s);
    }
}

Test(tunedb, unreadable_path_is_an_io_error) {
    fg_tune_identity id = h200();
    expect_refused(g_root, &id, FG_ERR_IO, (const char *[]){g_root, NULL}); /* a directory */
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
