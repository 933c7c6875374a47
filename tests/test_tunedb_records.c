/* test_tunedb_records.c: the tuning database's records (runtime/tunedb.c, tunedb_show.c). CPU only.
 *
 * Buckets round up to powers of two; adding replaces the same class and spec and refuses inconsistent
 * records; the winner comes from the nearest tuned bucket of the same dtype/head_dim/mask/gqa, within the
 * family asked for, ranked at the query's lengths, and is never a record that is not ok; the table and CSV
 * views; backward and serving records through the file. Files live in a mkdtemp directory under /tmp,
 * removed afterwards. */
#include <math.h>

#include "tests/tunedb_fixtures.h"

TestSuite(tunedb, .init = scratch_init, .fini = scratch_fini, .timeout = 60);

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
