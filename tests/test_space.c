/* test_space.c: tuning spaces (autotune/space.c). CPU only.
 *
 * The products, the bucketing, refused candidates with the rule's sentence, the errors with file:line,
 * the mma.sync/wgmma families and kind = "bwd" spaces, and the shipped configs/tune_fwd*.lua spaces.
 * Run from the repository root (configs/tune_fwd.lua). */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune/space.h"
#include "tests/test_util.h"

static char g_root[64]; /* this test's scratch directory */

static void scratch_init(void) { test_scratch_make(g_root, sizeof g_root, "fg-test-tune"); }

static void scratch_fini(void) { test_scratch_remove(g_root, "fg-test-tune"); }

TestSuite(space, .init = scratch_init, .fini = scratch_fini, .timeout = 30);

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

/* A serving space: kind "serve" with split counts as a candidate field, on the mma.sync family (sm_90 even on
 * an sm_90a GPU); the shipped decode space loads. */
Test(space, serve_space_gives_split_candidates) {
    const char *text = "space { kind = \"serve\", dtype = \"bf16\", head_dim = 128, gqa = 4, seqlen_q = 1, "
                       "seqlen_k = {4096, 65536}, batch_heads = 32, block_m = 16, block_n = 64, warps = 4, "
                       "stages = {3, 4}, splits = {1, 8, 300} }";
    fg_tune_space sp;
    fg_error err;
    cr_assert_eq(space_load_string("s.lua", text, strlen(text), 90, 1, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.count, 2);
    cr_assert_eq(sp.total, 12);
    cr_assert_eq(sp.refused, 4, "splits 300 is refused by serve_splits");
    for (int i = 0; i < sp.count; i++)
        for (int c = 0; c < sp.problems[i].ncands; c++) {
            const fg_spec *s = &sp.problems[i].cands[c].spec;
            cr_assert_eq(s->kind, FG_KIND_SERVE);
            cr_assert_eq(s->arch_accel, 0);
            cr_assert(s->splits == 1 || s->splits == 8 || s->splits == 300);
        }
    space_free(&sp);
    cr_assert_eq(space_load("configs/tune_serve.lua", 90, 0, &sp, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(sp.count, 40);
    cr_assert_eq(sp.refused, 0);
    space_free(&sp);
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

Test(space, serve_fields_are_checked) {
    expect_space_refused("space { kind = \"serve\", dtype = \"bf16\", head_dim = 128, seqlen_q = 1, batch_heads = 32, "
                         TILES " }", FG_ERR_CONFIG, "s.lua:1:", "needs field 'splits'");
    expect_space_refused("space { dtype = \"bf16\", head_dim = 128, seqlen_q = 1, batch_heads = 32, splits = 2, " TILES
                         " }", FG_ERR_CONFIG, "s.lua:1:", "'splits' is for kind \"serve\" only");
    expect_space_refused("space { kind = \"serve\", family = \"wgmma\", dtype = \"bf16\", head_dim = 128, seqlen_q = 1, "
                         "batch_heads = 32, splits = 2, " TILES " }", FG_ERR_CONFIG, "s.lua:1:", "family \"mma\" only");
}

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
                         TILES " }", FG_ERR_CONFIG, "s.lua:1:", "(\"fwd\", \"bwd\" or \"serve\")");
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
