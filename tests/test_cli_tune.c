/* test_cli_tune.c: the `flashgen tune` command (tools/cmd_tune.c): usage errors, space errors, --show
 * and its CSV, and with a GPU tiny sweeps (forward and backward), workers, --device all and resuming
 * after an interrupt, run as a user runs it through cli_harness.c. GPU tests skip without one. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include "runtime/bundle.h"
#include "runtime/cache.h"
#include "runtime/cuda_api.h"
#include "generator/emit.h"
#include "generator/spec.h"
#include "runtime/tunedb.h"
#include "tests/test_util.h"
#include "tests/cli_harness.h"

TestSuite(cli, .init = scratch_init, .fini = scratch_fini, .timeout = 60);

/* ---------------------------------------------------------------- tune */

/* A one-problem space small enough for a quick sweep: 4 candidates, the two with block_m 64 and 8 warps
 * refused by validation. */
static const char tiny_space[] =
    "-- a tiny tuning space\n"
    "space { dtype = \"fp16\", head_dim = 64, gqa = 2, seqlen_q = 100, seqlen_k = 200, batch_heads = 8,\n"
    "        block_m = {64, 128}, block_n = 64, warps = {4, 8}, stages = 2 }\n";

/* Errors in the space, or a problem that cannot be laid out, are reported with file:line before any GPU
 * is needed (so they show on machines without one), and nothing is written. */
Test(cli, tune_reports_space_errors_with_file_line) {
    struct {
        const char *name, *text, *want1, *want2;
    } cases[] = {
        {"syntax.lua", "-- line 1\nspace { dtype = \"bf16\",\n  head_dim = = 64 }\n", "syntax.lua:3", NULL},
        {"field.lua", "space { dtype = \"bf16\", head_dim = 64, seqlen_q = 128, batch_heads = 4,\n"
                      "        block_n = 64, warps = 4, stages = 2 }\n", "field.lua:1", "block_m"},
        {"grid.lua", "\nspace { dtype = \"bf16\", head_dim = 64, seqlen_q = 128, batch_heads = 40000000,\n"
                     "        block_m = 64, block_n = 64, warps = 4, stages = 2 }\n", "grid.lua:2", "65535"},
        {"empty.lua", "-- nothing here\n", "empty.lua", "space"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[200], db[200];
        snprintf(path, sizeof path, "%s/%s", g_dir, cases[i].name);
        snprintf(db, sizeof db, "%s/db.lua", g_dir);
        write_text(path, cases[i].text);
        run_result r = RUN("tune", path, "--db", db);
        cr_expect_eq(r.status, 1, "%s: exit %d, stderr: %s", cases[i].name, r.status, r.err);
        cr_expect_eq(strncmp(r.err, "flashgen tune: ", 15), 0, "%s: %s", cases[i].name, r.err);
        cr_expect_not_null(strstr(r.err, cases[i].want1), "%s: stderr does not name %s: %s", cases[i].name,
                           cases[i].want1, r.err);
        if (cases[i].want2)
            cr_expect_not_null(strstr(r.err, cases[i].want2), "%s: stderr does not name %s: %s", cases[i].name,
                               cases[i].want2, r.err);
        cr_expect_null(strstr(r.err, "no CUDA device"), "%s: the space error must come first: %s", cases[i].name, r.err);
        cr_expect_str_empty(r.out);
        cr_expect_eq(file_exists(db), 0, "%s: a failed sweep wrote %s", cases[i].name, db);
        run_free(&r);
    }
    char missing[200];
    snprintf(missing, sizeof missing, "%s/absent.lua", g_dir);
    run_result r = RUN("tune", missing);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "absent.lua"), "%s", r.err);
    run_free(&r);
}

/* Returns 1 when dir holds an entry whose name starts with prefix (a missing dir holds none). */
static int dir_has_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) found |= strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return found;
}

/* FLASHGEN_EMULATE_ARCH (another arch's code, for tests) and a sweep do not mix: refused before any GPU is
 * looked for, with a sentence naming the variable, and nothing written. */
Test(cli, tune_refuses_an_emulated_arch) {
    char space[200];
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    write_text(space, tiny_space);
    setenv("FLASHGEN_EMULATE_ARCH", "80", 1);
    run_result r = RUN("tune", space, "--iters", "2");
    unsetenv("FLASHGEN_EMULATE_ARCH");
    EXPECT_STATUS(r, 1);
    cr_expect_eq(strncmp(r.err, "flashgen tune: FLASHGEN_EMULATE_ARCH=80 is set", 46), 0, "%s", r.err);
    cr_expect_str_empty(r.out);
    cr_expect_eq(dir_has_prefix(g_cache, "tune-"), 0, "no database may be written");
    run_free(&r);
}

Test(cli, tune_without_a_gpu_says_so) {
    fg_error err;
    if (cuda_api_get(&err) != NULL) SKIP("a CUDA driver is present: see tune_tiny_sweep_on_gpu");
    char space[200];
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    write_text(space, tiny_space);
    run_result r = RUN("tune", space, "--iters", "2");
    EXPECT_STATUS(r, 1);
    cr_expect_eq(strncmp(r.err, "flashgen tune: no CUDA device: ", 31), 0, "%s", r.err);
    cr_expect_str_empty(r.out);
    cr_expect_eq(dir_has_prefix(g_cache, "tune-"), 0, "no database may be written without a GPU");
    run_free(&r);
    /* --show without FILE means this GPU's database: it needs the GPU to know which. */
    r = RUN("tune", "--show");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "flashgen tune: no CUDA device: "), "%s", r.err);
    run_free(&r);
}

/* A record of class c on sm_90, the mma.sync family on Hopper (tunedb rules: complete tiles, the class's
 * dtype/head_dim/mask). */
static fg_tune_record tune_rec(fg_tune_class c, int bm, int bn, int warps, fg_tune_status st, double ms, const char *note) {
    fg_tune_record r;
    memset(&r, 0, sizeof r);
    r.cls = c;
    r.spec = (fg_spec){.kind = FG_KIND_FWD, .arch = 90, .dtype = c.dtype, .head_dim = c.head_dim, .block_m = bm,
                       .block_n = bn, .warps = warps, .stages = 2, .causal = c.causal, .out_dtype = c.dtype};
    r.status = st;
    r.ms = ms;
    r.tflops = ms > 0 ? 100.0 / ms : 0;
    snprintf(r.note, sizeof r.note, "%s", note);
    return r;
}

/* Writes a database with records of every status into path. */
static void write_sample_db(const char *path) {
    fg_tune_identity id;
    tunedb_identity_init(&id, "NVIDIA H200", 90, 132, 13000, "13.0");
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_tune_class a = {FG_KIND_FWD, FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128};
    fg_tune_class b = {FG_KIND_FWD, FG_DTYPE_BF16, 128, 1, 1, 8192, 8192, 32};
    fg_tune_record recs[] = {
        tune_rec(a, 128, 64, 8, FG_TUNE_OK, 1.25, "max err 0.002"),
        tune_rec(a, 128, 48, 4, FG_TUNE_OK, 0.75, "max err 0.002"),        /* the winner of a, and sm_90's default */
        tune_rec(a, 64, 64, 4, FG_TUNE_WRONG, 0.5, "check failed"),       /* faster, but wrong: never wins */
        tune_rec(a, 64, 64, 8, FG_TUNE_REFUSED, 0, "block_m 64 with 8 warps is not supported"),
        tune_rec(a, 128, 128, 4, FG_TUNE_SPILLED, 0, "spills 64 bytes"),
        tune_rec(b, 128, 64, 8, FG_TUNE_FAILED, 0, "cuLaunchKernel failed"),
        tune_rec(b, 128, 32, 4, FG_TUNE_OK, 9.5, ""),
    };
    fg_error err;
    fg_error_clear(&err);
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++)
        cr_assert_eq(tunedb_add(&db, &recs[i], &err), FG_OK, "%s", err.msg);
    cr_assert_eq(tunedb_save(path, &db, &err), FG_OK, "%s", err.msg);
    tunedb_free(&db);
}

/* --show FILE needs no GPU, prints exactly the library's table of the file, and marks the fastest ok
 * record of each class, never a faster record of another status. */
Test(cli, tune_show_prints_the_database_table) {
    char db[200];
    snprintf(db, sizeof db, "%s/tune.lua", g_dir);
    write_sample_db(db);

    /* What the table must be: tunedb_format_table of the same file. */
    fg_tunedb loaded;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    char *want = NULL;
    size_t want_len = 0;
    FILE *mem = open_memstream(&want, &want_len);
    cr_assert_not_null(mem);
    cr_assert_eq(tunedb_format_table(&loaded, mem, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(fclose(mem), 0);
    tunedb_free(&loaded);

    run_result r = RUN("tune", "--show", db);
    EXPECT_STATUS(r, 0);
    cr_expect_str_empty(r.err);
    cr_expect_str_eq(r.out, want);
    cr_expect_not_null(strstr(r.out, "NVIDIA H200"), "%s", r.out);
    const char *statuses[] = {"ok", "wrong", "failed", "spilled", "refused"};
    for (size_t i = 0; i < 5; i++) {
        char word[16];
        snprintf(word, sizeof word, " %s ", statuses[i]);
        cr_expect_not_null(strstr(r.out, word), "the table lacks a '%s' record:\n%s", statuses[i], r.out);
    }
    /* One '*' per class with an ok record: on the 0.75 ms record and the 9.5 ms one. */
    int stars = 0;
    for (const char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "  *", 3) != 0) continue;
        stars++;
        size_t n = strcspn(line, "\n");
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), line);
        cr_expect(strstr(buf, " ok ") != NULL, "the winner must be ok: %s", buf);
        cr_expect(strstr(buf, "0.7500") != NULL || strstr(buf, "9.5000") != NULL, "wrong winner: %s", buf);
    }
    cr_expect_eq(stars, 2, "expected two winners:\n%s", r.out);
    run_free(&r);

    /* --csv: a header and one line per record, the winners flagged in the dispatch column. */
    r = RUN("tune", "--show", db, "--csv");
    EXPECT_STATUS(r, 0);
    cr_expect_eq(strncmp(r.out, "gpu,kind,dtype,head_dim,causal,gqa,", 35), 0, "%s", r.out);
    int lines = 0;
    for (const char *p = r.out; *p; p++) lines += *p == '\n';
    cr_expect_eq(lines, 1 + 7, "%s", r.out);
    cr_expect_not_null(strstr(r.out, ",128,48,4,2,ok,0.75,133.333,1,1,\"max err 0.002\""), "%s", r.out);
    run_free(&r);

    /* The same through --db. */
    r = RUN("tune", "--show", "--db", db);
    EXPECT_STATUS(r, 0);
    cr_expect_str_eq(r.out, want);
    run_free(&r);
    free(want);
}

Test(cli, tune_show_refuses_a_corrupt_or_missing_file) {
    char db[200], cut[200];
    snprintf(db, sizeof db, "%s/tune.lua", g_dir);
    snprintf(cut, sizeof cut, "%s/cut.lua", g_dir);
    write_sample_db(db);

    /* A syntax error: the reason with file:line. */
    char bad[200];
    snprintf(bad, sizeof bad, "%s/bad.lua", g_dir);
    write_text(bad, "tuning { format = 1, results = 1,\n  gpu = { name = \"NVIDIA H200\" \n");
    run_result r = RUN("tune", "--show", bad);
    EXPECT_STATUS(r, 1);
    cr_expect_str_empty(r.out);
    cr_expect_eq(strncmp(r.err, "flashgen tune: ", 15), 0, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "bad.lua:"), "the reason names file:line: %s", r.err);
    run_free(&r);

    /* The saved file without its last line: fewer results than the header says. */
    size_t len;
    char *text = slurp(db, &len);
    cr_assert_gt(len, 2u);
    size_t keep = len - 1;
    while (keep > 0 && text[keep - 1] != '\n') keep--;
    text[keep] = '\0';
    write_text(cut, text);
    free(text);
    r = RUN("tune", "--show", cut);
    EXPECT_STATUS(r, 1);
    cr_expect_str_empty(r.out);
    cr_expect_not_null(strstr(r.err, "cut.lua"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "result"), "the reason is the result count: %s", r.err);
    run_free(&r);

    char missing[200];
    snprintf(missing, sizeof missing, "%s/absent.lua", g_dir);
    r = RUN("tune", "--show", missing);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "no tuning database at "), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "absent.lua"), "%s", r.err);
    run_free(&r);
}

/* With a GPU: writes `text` to DIR/NAME.lua and tunes it into DIR/NAME-db.lua (db, n bytes) with 3 iterations
 * and 2 compile threads; the run must succeed, and its output goes back to the caller to check. */
static run_result tune_tiny(const char *name, const char *text, char *db, size_t n) {
    char space[200];
    snprintf(space, sizeof space, "%s/%s.lua", g_dir, name);
    snprintf(db, n, "%s/%s-db.lua", g_dir, name);
    write_text(space, text);
    run_result r = RUN("tune", space, "--db", db, "--iters", "3", "-j", "2");
    EXPECT_STATUS(r, 0);
    return r;
}

/* With a GPU: a tiny sweep records every candidate, the database loads and answers tunedb_best, a second
 * run resumes (measures nothing again), and a corrupt database is moved aside, never overwritten. */
Test(cli, tune_tiny_sweep_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char db[200], space[200];
    run_result r = tune_tiny("tiny", tiny_space, db, sizeof db);
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    cr_expect_not_null(strstr(r.err, "[4/4]"), "progress reaches 4/4:\n%s", r.err);
    cr_expect_not_null(strstr(r.out, "'*' marks"), "the table is printed:\n%s", r.out);
    run_free(&r);
    fg_tunedb loaded;
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4, "every candidate is recorded, refused ones too");
    int refused = 0, ok = 0;
    for (int i = 0; i < loaded.count; i++) {
        refused += loaded.records[i].status == FG_TUNE_REFUSED;
        ok += loaded.records[i].status == FG_TUNE_OK;
    }
    cr_expect_eq(refused, 1, "block_m 64 with 8 warps is refused");
    cr_expect_geq(ok, 1, "at least one candidate is correct and timed");
    fg_tune_class q = {FG_KIND_FWD, FG_DTYPE_F16, 64, 0, 2, 100, 200, 8};
    fg_spec best;
    cr_expect_eq(tunedb_best(&loaded, &q, &best, NULL, NULL, 0), FG_OK, "the sweep's winner answers the lookup");
    tunedb_free(&loaded);

    /* Resume: everything is in the database already. */
    r = RUN("tune", space, "--db", db, "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "4 already measured"), "%s", r.err);
    run_free(&r);

    /* A corrupt database is moved aside to FILE.bad-<time>, and a new one made. */
    write_text(db, "tuning { format = \n");
    r = RUN("tune", space, "--db", db, "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "moved it aside to "), "%s", r.err);
    cr_expect(dir_has_prefix(g_dir, "tiny-db.lua.bad-"), "the corrupt file is kept aside");
    run_free(&r);
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4);
    tunedb_free(&loaded);
}

/* A kind = "bwd" space: the backward's candidates checked (every gradient element against the CPU references on
 * a small problem of the class) and timed, a refused tile recorded with its rule, the records of kind "bwd";
 * and fg_attention_bwd on a context that reads the database runs the winner's tiles (fg_explain_bwd says so). */
static const char tiny_bwd_space[] =
    "space { kind = \"bwd\", dtype = \"bf16\", head_dim = 64, causal = true, gqa = 2, seqlen_q = 300, seqlen_k = 200,\n"
    "        batch_heads = 8, block_m = {32, 64}, block_n = 64, warps = {4, 8}, stages = {1, 2} }\n";

Test(cli, tune_tiny_backward_sweep_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char db[200];
    run_result r = tune_tiny("tiny-bwd", tiny_bwd_space, db, sizeof db);
    cr_expect_not_null(strstr(r.err, "timing the backward at batch"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "[8/8]"), "progress reaches 8/8:\n%s", r.err);
    run_free(&r);
    fg_tunedb loaded;
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 8, "every candidate is recorded, refused ones too");
    int refused = 0, ok = 0, checked = 0;
    for (int i = 0; i < loaded.count; i++) {
        const fg_tune_record *rec = &loaded.records[i];
        cr_expect_eq(rec->cls.kind, FG_KIND_BWD);
        refused += rec->status == FG_TUNE_REFUSED;
        ok += rec->status == FG_TUNE_OK;
        checked += rec->status == FG_TUNE_OK && strstr(rec->note, "gradients checked") != NULL;
    }
    cr_expect_eq(refused, 2, "32 x 64 on 8 warps (8 keys a warp, 32 rows) is refused by the backward's rules, both stages");
    cr_expect_geq(ok, 1, "at least one candidate is correct and timed");
    cr_expect_eq(checked, ok, "every timed candidate was checked first");
    fg_tune_class q = {FG_KIND_BWD, FG_DTYPE_BF16, 64, 1, 2, 300, 200, 8};
    fg_spec best;
    cr_assert_eq(tunedb_best(&loaded, &q, &best, NULL, NULL, 0), FG_OK, "the sweep's winner answers the lookup");
    tunedb_free(&loaded);
    /* Dispatch: a context reading the database runs the winner's tiles for a call of the class (the mma.sync
     * kernel: FLASHGEN_WGMMA_BWD=0, else Hopper's sm_90a backward takes head_dim 64). Tensor data may be NULL
     * for fg_explain_bwd. */
    setenv("FLASHGEN_WGMMA_BWD", "0", 1);
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.tuning_db = db;
    opt.disable_disk_cache = 1;
    fg_context *ctx = NULL;
    cr_assert_eq(fg_context_create(&ctx, &opt), FG_OK, "%s", fg_last_error(NULL));
    unsetenv("FLASHGEN_WGMMA_BWD");
    fg_tensor t[9];
    const int64_t shapes[9][4] = {{1, 300, 8, 64}, {1, 200, 4, 64}, {1, 200, 4, 64}, {1, 300, 8, 64}, {1, 300, 8, 64},
                                  {1, 300, 8, 64}, {1, 200, 4, 64}, {1, 200, 4, 64}, {1, 8, 300, 0}};
    for (int i = 0; i < 9; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].dtype = i == 8 ? FG_DTYPE_F32 : FG_DTYPE_BF16;
        t[i].ndim = i == 8 ? 3 : 4;
        int64_t stride = 1;
        for (int k = t[i].ndim - 1; k >= 0; k--) t[i].shape[k] = shapes[i][k], t[i].stride[k] = stride, stride *= shapes[i][k];
    }
    fg_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = t[0], a.k = t[1], a.v = t[2], a.o = t[3], a.dout = t[4], a.dq = t[5], a.dk = t[6], a.dv = t[7], a.lse = t[8];
    a.causal = 1;
    char text[2048], want[64];
    cr_assert_eq(fg_explain_bwd(ctx, &a, text, sizeof text), FG_OK, "%s", fg_last_error(ctx));
    snprintf(want, sizeof want, "block_m=%d,block_n=%d,", best.block_m, best.block_n);
    cr_expect_not_null(strstr(text, want), "the tuned winner (%s warps %d stages %d): %s", want, best.warps, best.stages,
                       text);
    snprintf(want, sizeof want, "stages=%d,", best.stages);
    cr_expect_not_null(strstr(text, want), "%s", text);
    cr_expect_not_null(strstr(text, "tiles: the tuning database's winner"), "%s", text);
    fg_context_destroy(ctx);
}

/* --device all: one worker process per GPU (on a one-GPU machine, one worker), each writing its own part
 * file that the parent merges into the model's database and removes; the table is printed once. A part
 * left by a killed run is merged before the workers start, so its records are not measured again. */
Test(cli, tune_device_all_merges_worker_parts_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char space[200], db[200], part[240];
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    snprintf(db, sizeof db, "%s/multi-db.lua", g_dir);
    write_text(space, tiny_space);

    run_result r = RUN("tune", space, "--device", "all", "--db", db, "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "[gpu 0] "), "worker lines carry their GPU:\n%s", r.err);
    cr_expect_not_null(strstr(r.err, "merged the workers' "), "%s", r.err);
    const char *table = strstr(r.out, "'*' marks");
    cr_expect(table && !strstr(table + 1, "'*' marks"), "the table is printed once, by the parent:\n%s", r.out);
    run_free(&r);
    cr_expect_eq(dir_has_prefix(g_dir, "multi-db.lua.gpu"), 0, "the part files are removed after the merge");
    fg_tunedb loaded;
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4, "every candidate is recorded in the model's database");

    /* A part left behind (as by a killed run): its records are merged first, and count as measured. */
    snprintf(part, sizeof part, "%s.gpu7.part", db);
    cr_assert_eq(tunedb_save(part, &loaded, &err), FG_OK, "%s", err.msg);
    tunedb_free(&loaded);
    write_text(db, "tuning { format = \n"); /* and the database itself corrupt: moved aside, rebuilt from the part */
    r = RUN("tune", space, "--device", "0", "--device", "all", "--db", db, "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "merged 4 records left by an earlier run"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "4 already measured"), "%s", r.err);
    run_free(&r);
    cr_expect_eq(dir_has_prefix(g_dir, "multi-db.lua.gpu"), 0);
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4);
    tunedb_free(&loaded);
}

/* Ctrl-C mid-sweep: the current candidate finishes, what was measured is saved, exit 1; the same
 * command resumes without measuring those again, and --budget stops a sweep early with exit 0. */
Test(cli, tune_interrupt_saves_and_resumes_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char space[200], db[200];
    snprintf(space, sizeof space, "%s/six.lua", g_dir);
    snprintf(db, sizeof db, "%s/six-db.lua", g_dir);
    /* 6 problems x 4 candidates; one compile takes about a second on one thread, so the signal lands
     * after some problems are done and before all are. */
    write_text(space, "space { dtype = \"bf16\", head_dim = {32, 64, 96}, causal = {false, true}, seqlen_q = 256,\n"
                      "        batch_heads = 8, block_m = {64, 128}, block_n = {32, 64}, warps = 4, stages = 2 }\n");
    pid_t pid = start_run(NULL, (const char *const[]){"tune", space, "--db", db, "-j", "1", "--iters", "2", NULL});
    sleep(4);
    cr_assert_eq(kill(pid, SIGINT), 0);
    run_result r = finish_run(pid);
    int total = 24, saved = 0;
    if (r.status == 0) { /* finished before the signal: nothing to resume; the test says so */
        cr_log_warn("the sweep finished within 4 s; the interrupt was not exercised");
    } else {
        EXPECT_STATUS(r, 1);
        cr_expect_not_null(strstr(r.err, "interrupted; "), "%s", r.err);
        fg_tunedb part;
        cr_assert_eq(tunedb_load(db, NULL, &part, &err), FG_OK, "the database is saved on interrupt: %s", err.msg);
        saved = part.count;
        tunedb_free(&part);
        cr_expect(saved > 0 && saved < total, "saved %d of %d", saved, total);
    }
    run_free(&r);

    r = RUN("tune", space, "--db", db, "--iters", "2", "--budget", "1");
    EXPECT_STATUS(r, 0);
    char want[64];
    snprintf(want, sizeof want, "%d already measured", saved);
    cr_expect_not_null(strstr(r.err, want), "the resumed sweep skips what was saved:\n%s", r.err);
    run_free(&r);
    r = RUN("tune", space, "--db", db, "--iters", "2");
    EXPECT_STATUS(r, 0);
    run_free(&r);
    fg_tunedb all;
    cr_assert_eq(tunedb_load(db, NULL, &all, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(all.count, total);
    tunedb_free(&all);
}

/* Two workers dealing a space's problems and merging into one database: on a one-GPU machine both run
 * on device 0 (FLASHGEN_TUNE_SHARE_DEVICE=1, the test hook that allows a device twice). */
Test(cli, tune_two_workers_deal_problems_and_merge_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char space[200], db[200];
    snprintf(space, sizeof space, "%s/two.lua", g_dir);
    snprintf(db, sizeof db, "%s/two-db.lua", g_dir);
    write_text(space, "space { dtype = \"bf16\", head_dim = 64, seqlen_q = {100, 300}, batch_heads = 8,\n"
                      "        block_m = {64, 128}, block_n = 64, warps = 4, stages = 2 }\n");
    setenv("FLASHGEN_TUNE_SHARE_DEVICE", "1", 1);
    run_result r = RUN("tune", space, "--device", "0,0", "--db", db, "--iters", "2");
    unsetenv("FLASHGEN_TUNE_SHARE_DEVICE");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "this worker: every 2nd problem from number 1"), "worker 0 takes problem 1:\n%s",
                       r.err);
    cr_expect_not_null(strstr(r.err, "this worker: every 2nd problem from number 2"), "worker 1 takes problem 2:\n%s",
                       r.err);
    cr_expect_not_null(strstr(r.err, "2 workers started"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "merged the workers' "), "%s", r.err);
    run_free(&r);
    cr_expect_eq(dir_has_prefix(g_dir, "two-db.lua.gpu"), 0, "the part files are removed after the merge");
    fg_tunedb loaded;
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4, "both problems' two candidates are in the merged database");
    tunedb_free(&loaded);
}

/* --device takes an ordinal, a list or all; --csv goes with --show; --shard is one worker's. */
Test(cli, tune_device_and_csv_usage_errors) {
    static const struct {
        const char *args[4];
        const char *says;
    } cases[] = {
        {{"--device", "0,0", NULL}, "device 0 is listed twice"},
        {{"--device", "1,x", NULL}, "expected an ordinal (0-1023), a list such as 0,2,3, or all"},
        {{"--device", "-1", NULL}, "expected an ordinal"},
        {{"--csv", NULL}, "--csv is a form of --show"},
        {{"--shard", "2/2", NULL}, "--shard '2/2': expected K/N with 0 <= K < N"},
        {{"--shard", "0/2", "--device", "all"}, "--shard is for one worker of a sweep: one --device"},
    };
    char space[200];
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    write_text(space, tiny_space);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[8] = {"tune", space};
        int n = 2;
        for (int k = 0; k < 4 && cases[i].args[k]; k++) argv[n++] = cases[i].args[k];
        argv[n] = NULL;
        run_result r = run(argv);
        EXPECT_STATUS(r, 2);
        cr_expect_not_null(strstr(r.err, cases[i].says), "case %zu: %s", i, r.err);
        run_free(&r);
    }
    run_result r = RUN("tune", "--show", "--device", "0,1", "x.lua");
    EXPECT_STATUS(r, 2);
    cr_expect_not_null(strstr(r.err, "--show takes one --device"), "%s", r.err);
    run_free(&r);
}
