/* tunedb_show.c: the tuning database as a table for people and as CSV for plots (`flashgen tune --show`). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/files.h"
#include "core/lua_sandbox.h"
#include "core/csv.h"
#include "runtime/tunedb.h"
#include "core/alloc.h"

#define TDB_BUCKET_MAX ((int64_t)1 << 62) /* the largest bucket: the next power of two would overflow */
#define TDB_DEVICE_SLUG_MAX 64            /* bytes of the device name in a file name */
#define TDB_NOTE_READ_MAX 4096            /* longest note string accepted from a file (then truncated) */

/* ------------------------------------------------------------------ the table */

/* Display order within a class: ok records fastest first, then the others by status; ties by the tiles
 * as numbers (block_m, block_n, warps, stages: 64 before 128, unlike the names), then by name. */
static int tdb_show_cmp(const void *pa, const void *pb) {
    const fg_tune_record *a = *(const fg_tune_record *const *)pa, *b = *(const fg_tune_record *const *)pb;
    if (a->status != b->status && (a->status == FG_TUNE_OK || b->status == FG_TUNE_OK))
        return a->status == FG_TUNE_OK ? -1 : 1;
    if (a->status == FG_TUNE_OK && a->ms != b->ms)
        return a->ms < b->ms ? -1 : 1;
    if (a->status != b->status)
        return a->status < b->status ? -1 : 1;
    int ka[4] = {a->spec.block_m, a->spec.block_n, a->spec.warps, a->spec.stages};
    int kb[4] = {b->spec.block_m, b->spec.block_n, b->spec.warps, b->spec.stages};
    for (int i = 0; i < 4; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i] ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The note with control bytes shown as spaces, so one record stays one line. */
static void tdb_print_note(FILE *out, const char *note) {
    for (const unsigned char *p = (const unsigned char *)note; *p; p++)
        fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, out);
}

/* Whether r's variant has the tiles the built-in tile policy gives its spec (dispatch's choice without a
 * tuning database). */
static int tdb_is_default(const fg_tune_record *r, const fg_tile_policy *policy) {
    const fg_tile_rule *t = tile_policy_lookup(policy, &r->spec);
    return t && t->block_m == r->spec.block_m && t->block_n == r->spec.block_n && t->warps == r->spec.warps &&
           t->stages == r->spec.stages;
}

/* Sorts db's records for display into row (db->count entries): class by class, each class ok records
 * fastest first, then the others. Returns the array (caller frees), or NULL with err filled. */
static const fg_tune_record **tdb_sorted_rows(const fg_tunedb *db, fg_error *err) {
    const fg_tune_record **row = fg_malloc((size_t)(db->count ? db->count : 1) * sizeof *row);
    if (row == NULL) {
        fg_fail(err, FG_ERR_NO_MEMORY, "out of memory sorting %d tuning records for display", db->count);
        return NULL;
    }
    for (int i = 0; i < db->count;) {
        int j = i;
        while (j < db->count && tunedb_class_cmp(&db->records[j].cls, &db->records[i].cls) == 0) {
            row[j] = &db->records[j];
            j++;
        }
        qsort(row + i, (size_t)(j - i), sizeof *row, tdb_show_cmp);
        i = j;
    }
    return row;
}

/* What both displays need: the built-in tile policy (to mark defaults) in *policy and the sorted rows.
 * Returns the rows (free them and tile_policy_free the policy), or NULL with err filled. */
static const fg_tune_record **tdb_display_rows(const fg_tunedb *db, fg_tile_policy *policy, fg_error *err) {
    if (tile_policy_init_default(policy, err) != FG_OK) return NULL;
    const fg_tune_record **row = tdb_sorted_rows(db, err);
    if (row == NULL) tile_policy_free(policy);
    return row;
}

/* Ends a table or CSV: FG_ERR_IO when out reports a write error. */
static fg_status tdb_flush(FILE *out, fg_error *err) {
    if (fflush(out) != 0 || ferror(out))
        return fg_fail(err, FG_ERR_IO, "writing the tuning table failed: %s", strerror(errno));
    return FG_OK;
}

fg_status tunedb_format_table(const fg_tunedb *db, FILE *out, fg_error *err) {
    if (db == NULL || out == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "tunedb_format_table: the database and the stream must not be NULL");
    const fg_tune_identity *id = &db->id;
    int classes = 0, ok = 0;
    for (int i = 0; i < db->count; i++) {
        classes += i == 0 || tunedb_class_cmp(&db->records[i].cls, &db->records[i - 1].cls) != 0;
        ok += db->records[i].status == FG_TUNE_OK;
    }
    fg_tile_policy policy;
    const fg_tune_record **row = tdb_display_rows(db, &policy, err);
    if (row == NULL) return err->status;
    fprintf(out, "tuning database: %s, sm_%d, %d SMs, CUDA driver %d.%d, NVRTC %s, flashgen %s\n", id->device,
            id->arch, id->sm_count, id->driver_version / 1000, id->driver_version % 1000 / 10, id->nvrtc, id->flashgen);
    fprintf(out, "%d class%s, %d result%s (%d ok); '*' marks the variant dispatch uses, 'd' the tile policy's "
            "default (dispatch's choice without tuning)\n", classes, classes == 1 ? "" : "es", db->count,
            db->count == 1 ? "" : "s", ok);
    for (int i = 0; i < db->count;) {
        int j = i, nok = 0;
        const fg_tune_record *dflt = NULL;
        while (j < db->count && tunedb_class_cmp(&row[j]->cls, &row[i]->cls) == 0) {
            nok += row[j]->status == FG_TUNE_OK;
            if (!dflt && tdb_is_default(row[j], &policy)) dflt = row[j];
            j++;
        }
        char cls[200];
        tunedb_class_text(&row[i]->cls, 1, cls, sizeof cls);
        fprintf(out, "\n%s: %d measured, %d ok", cls, j - i, nok);
        if (nok && dflt && dflt->status == FG_TUNE_OK)
            fprintf(out, "; tuned %.3fx the default (%.4f ms against %.4f ms)", dflt->ms / row[i]->ms, row[i]->ms,
                    dflt->ms);
        else if (nok)
            fprintf(out, "; the default %s", dflt ? "was not timed ok" : "is not among the candidates");
        fprintf(out, "\n     block_m block_n warps stages  status         ms  TFLOP/s  note\n");
        for (int k = i; k < j; k++) {
            const fg_tune_record *r = row[k];
            fprintf(out, "  %c%c %7d %7d %5d %6d  %-7s ", k == i && r->status == FG_TUNE_OK ? '*' : ' ',
                    r == dflt ? 'd' : ' ', r->spec.block_m, r->spec.block_n, r->spec.warps, r->spec.stages,
                    tunedb_status_name(r->status));
            if (r->ms > 0)
                fprintf(out, "%9.4f %8.1f", r->ms, r->tflops);
            else
                fprintf(out, "%9s %8s", "-", "-");
            if (r->note[0]) {
                fputs("  ", out);
                tdb_print_note(out, r->note);
            }
            fputc('\n', out);
        }
        i = j;
    }
    free(row);
    tile_policy_free(&policy);
    return tdb_flush(out, err);
}

fg_status tunedb_format_csv(const fg_tunedb *db, FILE *out, fg_error *err) {
    if (db == NULL || out == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "tunedb_format_csv: the database and the stream must not be NULL");
    fg_tile_policy policy;
    const fg_tune_record **row = tdb_display_rows(db, &policy, err);
    if (row == NULL) return err->status;
    fputs("gpu,kind,dtype,head_dim,causal,gqa,seqlen_q,seqlen_k,batch_heads,block_m,block_n,warps,stages,status,ms,"
          "tflops,dispatch,default,note\n", out);
    for (int i = 0; i < db->count; i++) {
        const fg_tune_record *r = row[i];
        int first = i == 0 || tunedb_class_cmp(&row[i - 1]->cls, &r->cls) != 0;
        csv_field(out, db->id.device);
        fprintf(out, ",%s,%s,%d,%d,%d,%lld,%lld,%lld,%d,%d,%d,%d,%s,%.6g,%.6g,%d,%d,", tunedb_kind_name(r->cls.kind),
                dtype_name(r->cls.dtype), r->cls.head_dim, r->cls.causal, r->cls.gqa, (long long)r->cls.seqlen_q,
                (long long)r->cls.seqlen_k, (long long)r->cls.batch_heads, r->spec.block_m, r->spec.block_n,
                r->spec.warps, r->spec.stages, tunedb_status_name(r->status), r->ms, r->tflops,
                first && r->status == FG_TUNE_OK, tdb_is_default(r, &policy));
        csv_field(out, r->note);
        fputc('\n', out);
    }
    free(row);
    tile_policy_free(&policy);
    return tdb_flush(out, err);
}
