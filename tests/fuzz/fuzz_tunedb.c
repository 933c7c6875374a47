/* fuzz_tunedb.c: libFuzzer target for the tuning database's reader (runtime/tunedb_file.c), built by
 * tests/fuzz/run.sh.
 *
 * The input is a database file (Lua, run in the config sandbox with `tuning` and `result` bound), written to
 * a file of this process's own and loaded for one GPU identity. Whatever the bytes, tunedb_load must return
 * without crashing, leaking or undefined behaviour, and a refusal must carry a sentence. A database it
 * accepts must then serve lookups (every kind and mask), print as a table, and survive a save and a reload
 * with the same records (a database flashgen writes must read back as itself). A broken invariant aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/tunedb.h"

static void fuzz_fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_tunedb: %s\n  detail: %s\n", what, detail);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[128], saved[128];
    if (!path[0]) {
        const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof path, "%s/fg-fuzz-tunedb-%d.lua", dir, (int)getpid());
        snprintf(saved, sizeof saved, "%s/fg-fuzz-tunedb-%d-saved.lua", dir, (int)getpid());
    }
    FILE *f = fopen(path, "wb");
    if (!f) fuzz_fail("cannot write the input file", path);
    if (size && fwrite(data, 1, size, f) != size) fuzz_fail("cannot write the input file", path);
    fclose(f);

    fg_tune_identity id;
    tunedb_identity_init(&id, "NVIDIA H200", 90, 132, 13000, "13.0");
    fg_tunedb db;
    fg_error err;
    fg_error_clear(&err);
    if (tunedb_load(path, &id, &db, &err) != FG_OK) {
        if (!err.msg[0]) fuzz_fail("tunedb_load refused without a sentence", "");
        tunedb_free(&db);
        return 0;
    }
    /* lookups: every kind, both masks, a few sizes */
    for (int kind = 0; kind < 3; kind++)
        for (int causal = 0; causal < 2; causal++) {
            fg_tune_class q;
            memset(&q, 0, sizeof q);
            q.kind = (fg_kind)kind, q.dtype = FG_DTYPE_BF16, q.head_dim = 128, q.causal = causal, q.gqa = 4;
            q.seqlen_q = kind == 2 ? 1 : 4096, q.seqlen_k = 4096 << causal, q.batch_heads = 256;
            fg_spec s;
            fg_tune_record rec;
            char why[256];
            for (int accel = -1; accel <= 1; accel++)
                (void)tunedb_best_for(&db, &q, accel, &s, &rec, why, sizeof why);
        }
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        fg_error_clear(&err);
        if (tunedb_format_table(&db, null, &err) != FG_OK && !err.msg[0]) fuzz_fail("table without a sentence", "");
        fclose(null);
    }
    /* a save reads back as the same records */
    fg_error_clear(&err);
    if (tunedb_save(saved, &db, &err) != FG_OK) fuzz_fail("an accepted database could not be saved", err.msg);
    fg_tunedb again;
    fg_error_clear(&err);
    if (tunedb_load(saved, &id, &again, &err) != FG_OK) fuzz_fail("a saved database did not load back", err.msg);
    if (again.count != db.count) fuzz_fail("a saved database loaded back with another count", "");
    for (int i = 0; i < db.count; i++)
        if (strcmp(db.records[i].name, again.records[i].name) != 0 || db.records[i].status != again.records[i].status)
            fuzz_fail("a saved database loaded back with other records", db.records[i].name);
    tunedb_free(&again);
    tunedb_free(&db);
    return 0;
}
