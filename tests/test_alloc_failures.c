/* test_alloc_failures.c: allocation-failure injection (core/alloc.h, SQLite's practice) on the CPU side, by
 * the walk of tests/alloc_walk.h: for each operation, n walks over every host allocation it makes; the n-th
 * fails, and the operation must return a status other than FG_OK with a sentence (never crash, never report
 * success with a part missing); then the same operation without injection must still succeed, so nothing
 * was left half-changed. Leaks are judged by the sanitizer build (`sh configure --asan`, tests/run.sh's
 * header). Operations: loading the default config (the Lua sandbox's allocations included) and one naming a
 * mod file, loading a tuning database, parsing a bundle, emitting and flattening a kernel's source, a JIT compile
 * with NVRTC (the merge kernel: the smallest). Needs no GPU; the GPU side (contexts, forward, backward and serving calls) is
 * test_gpu_alloc_failures.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/files.h"
#include "generator/config.h"
#include "generator/emit.h"
#include "runtime/bundle.h"
#include "runtime/compile.h"
#include "runtime/tunedb.h"
#include "tests/alloc_walk.h"
#include "tests/test_util.h"

TestSuite(alloc, .timeout = 120);

/* Loads the config at path user. */
static fg_status load_config(void *user, fg_error *err) {
    fg_config cfg;
    fg_status st = config_load_file((const char *)user, NULL, &cfg, err);
    if (st == FG_OK) config_free(&cfg);
    return st;
}

Test(alloc, config_load) { walk("loading configs/default.lua", load_config, (void *)"configs/default.lua"); }

/* A config naming a mod file: the path recorded while the chunk runs, the file traced and registered after. */
Test(alloc, config_load_with_a_mod_file) {
    char dir[64], cfg[96], mod[96];
    test_scratch_make(dir, sizeof dir, "fg-test-alloc");
    snprintf(cfg, sizeof cfg, "%s/cfg.lua", dir);
    snprintf(mod, sizeof mod, "%s/mask.lua", dir);
    FILE *f = fopen(mod, "w");
    cr_assert_not_null(f);
    fputs("mask_mod = function(b, h, q, kv) return fg.le(kv, q) end\n", f);
    cr_assert_eq(fclose(f), 0);
    f = fopen(cfg, "w");
    cr_assert_not_null(f);
    fputs("variants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 64, mod = 'mask.lua' }\n", f);
    cr_assert_eq(fclose(f), 0);
    walk("loading a config that names a mod file", load_config, cfg);
    test_scratch_remove(dir, "fg-test-alloc");
}

static fg_status emit_one(void *user, fg_error *err) {
    const fg_spec *s = user;
    char *src = NULL, *flat = NULL;
    size_t len;
    fg_status st = emit_source(s, &src, &len, err);
    if (st == FG_OK) st = emit_flatten(src, &flat, &len, err);
    free(src);
    free(flat);
    return st;
}

Test(alloc, emit_source_and_flatten) {
    fg_spec s;
    fg_error err;
    cr_assert_eq(spec_parse("arch=sm_90,block_m=16,block_n=64,causal=1,dtype=bf16,head_dim=128,kind=serve,stages=4,"
                            "warps=4", &s, &err), FG_OK, "%s", err.msg);
    walk("emitting a serve variant", emit_one, &s);
}

typedef struct bundle_case {
    uint8_t *bytes;
    size_t len;
} bundle_case;

static fg_status parse_bundle(void *user, fg_error *err) {
    const bundle_case *b = user;
    fg_bundle out;
    fg_status st = bundle_parse(b->bytes, b->len, &out, err);
    if (st == FG_OK) bundle_free(&out);
    return st;
}

Test(alloc, bundle_parse) {
    fg_bundle b;
    fg_error err;
    memset(&b, 0, sizeof b);
    static const char *const names[3] = {"arch=sm_80,kind=merge", "arch=sm_90,kind=merge", "arch=sm_120,kind=merge"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(bundle_add(&b, names[i], (const uint8_t *)"payload bytes", 13, &err), FG_OK, "%s", err.msg);
    bundle_case c;
    cr_assert_eq(bundle_serialize(&b, &c.bytes, &c.len, &err), FG_OK, "%s", err.msg);
    bundle_free(&b);
    walk("parsing a bundle", parse_bundle, &c);
    free(c.bytes);
}

static fg_status load_tunedb(void *user, fg_error *err) {
    fg_tunedb db;
    fg_status st = tunedb_load((const char *)user, NULL, &db, err);
    if (st == FG_OK) tunedb_free(&db);
    return st;
}

Test(alloc, tunedb_load) {
    char dir[64], path[96];
    test_scratch_make(dir, sizeof dir, "fg-test-alloc");
    snprintf(path, sizeof path, "%s/db.lua", dir);
    fg_tune_identity id;
    tunedb_identity_init(&id, "NVIDIA H100", 90, 132, 13000, "13.0");
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_error err;
    for (int i = 0; i < 4; i++) {
        fg_tune_record r;
        memset(&r, 0, sizeof r);
        r.cls = (fg_tune_class){FG_KIND_FWD, FG_DTYPE_BF16, 128, i % 2, 1, 1024 << i, 1024 << i, 64};
        cr_assert_eq(spec_parse("arch=sm_90,dtype=bf16,head_dim=128,kind=fwd,block_m=128,block_n=64,warps=8,stages=2",
                                &r.spec, &err), FG_OK, "%s", err.msg);
        r.spec.causal = i % 2;
        r.status = FG_TUNE_OK;
        r.ms = 1.0 + i;
        cr_assert_eq(tunedb_add(&db, &r, &err), FG_OK, "%s", err.msg);
    }
    cr_assert_eq(tunedb_save(path, &db, &err), FG_OK, "%s", err.msg);
    tunedb_free(&db);
    /* Out of memory must read as FG_ERR_NO_MEMORY, never as a corrupt file (FG_ERR_FORMAT): a context ignores a
     * corrupt database with a warning and carries on, which for a full memory meant dispatching without it. */
    const alloc_walk w = {"loading a tuning database", path, NULL, load_tunedb, NULL, NULL, NULL, 1};
    alloc_walk_run(&w);
    test_scratch_remove(dir, "fg-test-alloc");
}

static fg_status jit_compile(void *user, fg_error *err) {
    fg_compile_result r;
    memset(&r, 0, sizeof r);
    fg_status st = compile_spec((const fg_spec *)user, 0, &r, err);
    compile_result_free(&r); /* a failed compile keeps NVRTC's log */
    return st;
}

Test(alloc, jit_compile) {
    fg_spec s;
    fg_error err;
    cr_assert_eq(spec_parse("arch=sm_90,kind=merge", &s, &err), FG_OK, "%s", err.msg);
    walk("a JIT compile of the merge kernel", jit_compile, &s);
}
