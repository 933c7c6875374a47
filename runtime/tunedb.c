/* tunedb.c: the per-GPU tuning database in memory (see tunedb.h): identity, records and the winner
 * lookup; tunedb_file.c reads and writes its file, tunedb_show.c prints it.
 *
 * Records stay sorted by (class, spec name), so lookups by key are binary searches, a save needs no
 * sort, and the file's order is a function of its contents alone. */
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
#include "runtime/tunedb.h"
#include "core/alloc.h"

#define TDB_BUCKET_MAX ((int64_t)1 << 62) /* the largest bucket: the next power of two would overflow */
#define TDB_DEVICE_SLUG_MAX 64            /* bytes of the device name in a file name */
#define TDB_NOTE_READ_MAX 4096            /* longest note string accepted from a file (then truncated) */

static const char *const tdb_status_names[FG_TUNE_STATUS_COUNT] = {"ok", "wrong", "failed", "spilled", "refused"};

/* ------------------------------------------------------------------ identity, life cycle, names */

void tunedb_identity_init(fg_tune_identity *id, const char *device, int arch, int sm_count, int driver_version,
                          const char *nvrtc) {
    memset(id, 0, sizeof *id);
    snprintf(id->device, sizeof id->device, "%s", device ? device : "");
    id->arch = arch;
    id->sm_count = sm_count;
    id->driver_version = driver_version;
    snprintf(id->nvrtc, sizeof id->nvrtc, "%s", nvrtc ? nvrtc : "");
    snprintf(id->flashgen, sizeof id->flashgen, "%s", FG_VERSION_STRING);
}

void tunedb_init(fg_tunedb *db, const fg_tune_identity *id) {
    memset(db, 0, sizeof *db);
    if (id)
        db->id = *id;
}

void tunedb_free(fg_tunedb *db) {
    if (db == NULL)
        return;
    free(db->records);
    db->records = NULL;
    db->count = 0;
    db->cap = 0;
}

int64_t tunedb_bucket(int64_t v) {
    if (v <= 1)
        return 1;
    if (v >= TDB_BUCKET_MAX)
        return TDB_BUCKET_MAX;
    int64_t b = 1;
    while (b < v)
        b <<= 1;
    return b;
}

const char *tunedb_status_name(fg_tune_status status) {
    if ((unsigned)status < FG_TUNE_STATUS_COUNT)
        return tdb_status_names[status];
    return "unknown";
}

fg_status tunedb_status_parse(const char *text, fg_tune_status *out, fg_error *err) {
    for (int i = 0; i < FG_TUNE_STATUS_COUNT; i++)
        if (text && strcmp(text, tdb_status_names[i]) == 0) {
            *out = (fg_tune_status)i;
            return FG_OK;
        }
    return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                   "tuning status '%.40s' is not one of ok, wrong, failed, spilled, refused", text ? text : "(null)");
}

fg_status tunedb_path(const char *dir, const fg_tune_identity *id, char *buf, size_t n, fg_error *err) {
    if (dir == NULL || dir[0] == '\0' || id == NULL || buf == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "tunedb_path: the directory, identity and buffer must be given");
    /* The name must be one path component whatever the driver reports: anything but [A-Za-z0-9._]
     * becomes '-', runs collapse, and no '-' starts or ends it. */
    char slug[TDB_DEVICE_SLUG_MAX + 1];
    size_t k = 0;
    for (const char *p = id->device; *p && k < TDB_DEVICE_SLUG_MAX; p++) {
        char c = *p;
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
        if (keep)
            slug[k++] = c;
        else if (k > 0 && slug[k - 1] != '-')
            slug[k++] = '-';
    }
    while (k > 0 && slug[k - 1] == '-')
        k--;
    slug[k] = '\0';
    size_t dl = strlen(dir);
    int w = snprintf(buf, n, "%s%stune-%s-sm%d-%dsm.lua", dir, dir[dl - 1] == '/' ? "" : "/",
                     k ? slug : "unknown", id->arch, id->sm_count);
    if (w < 0 || (size_t)w >= n)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "tunedb_path: the path in '%.200s' needs %d bytes; the buffer has %zu",
                       dir, w, n);
    return FG_OK;
}

/* ------------------------------------------------------------------ records: order, checks, add */

/* c with its size fields bucketed and causal normalized to 0/1: the form records are stored in. */
static fg_tune_class tdb_bucketed(const fg_tune_class *c) {
    fg_tune_class b = *c;
    b.causal = c->causal != 0;
    b.seqlen_q = tunedb_bucket(c->seqlen_q);
    b.seqlen_k = tunedb_bucket(c->seqlen_k);
    b.batch_heads = tunedb_bucket(c->batch_heads);
    return b;
}

/* Total order over (bucketed) classes; the field order is the file's sort order. */
int tunedb_class_cmp(const fg_tune_class *a, const fg_tune_class *b) {
    long long ka[8] = {(long long)a->kind, (long long)a->dtype, a->head_dim, a->causal, a->gqa,
                       (long long)a->seqlen_q, (long long)a->seqlen_k, (long long)a->batch_heads};
    long long kb[8] = {(long long)b->kind, (long long)b->dtype, b->head_dim, b->causal, b->gqa,
                       (long long)b->seqlen_q, (long long)b->seqlen_k, (long long)b->batch_heads};
    for (int i = 0; i < 8; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

/* Same kind, dtype, head_dim, mask and GQA ratio: the fields tunedb_best never approximates. */
static int tdb_same_family(const fg_tune_class *a, const fg_tune_class *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->head_dim == b->head_dim &&
           (a->causal != 0) == (b->causal != 0) && a->gqa == b->gqa;
}

static int tdb_same_bucket(const fg_tune_class *a, const fg_tune_class *b) {
    return a->seqlen_q == b->seqlen_q && a->seqlen_k == b->seqlen_k && a->batch_heads == b->batch_heads;
}

/* The name a class's kind has in the file and the tables: "fwd", "bwd" or "serve". */
const char *tunedb_kind_name(fg_kind k) {
    return (unsigned)k >= FG_KIND_MERGE ? "unknown-kind" : spec_kind_name(k); /* merge kernels are never tuned */
}

/* "fwd bf16 head_dim 128 causal gqa 1" (family only) or with " sq 2048 sk 2048 bh 128" (buckets too). */
void tunedb_class_text(const fg_tune_class *c, int buckets, char *buf, size_t n) {
    int w = snprintf(buf, n, "%s %s head_dim %d %s gqa %d", tunedb_kind_name(c->kind),
                     dtype_name(c->dtype), c->head_dim, c->causal ? "causal" : "not causal", c->gqa);
    if (buckets && w >= 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, ", bucket sq %lld sk %lld bh %lld", (long long)c->seqlen_q,
                 (long long)c->seqlen_k, (long long)c->batch_heads);
}

/* Index of the record with key (cls, name) in db, setting *found; else where it would be inserted. */
static int tdb_find(const fg_tunedb *db, const fg_tune_class *cls, const char *name, int *found) {
    int lo = 0, hi = db->count;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const fg_tune_record *r = &db->records[mid];
        int c = tunedb_class_cmp(&r->cls, cls);
        if (c == 0)
            c = strcmp(r->name, name);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < db->count && tunedb_class_cmp(&db->records[lo].cls, cls) == 0 && strcmp(db->records[lo].name, name) == 0;
    return lo;
}

/* The consistency rules of a record r (class already bucketed, name filled) for database db. */
static fg_status tdb_check(const fg_tunedb *db, const fg_tune_record *r, fg_error *err) {
    char cls[200];
    tunedb_class_text(&r->cls, 0, cls, sizeof cls);
    const fg_spec *s = &r->spec;
    if (r->cls.kind != FG_KIND_FWD && r->cls.kind != FG_KIND_BWD && r->cls.kind != FG_KIND_SERVE)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "class kind %d is not a kernel family (fwd, bwd, serve)",
                       (int)r->cls.kind);
    if ((int)r->cls.dtype < (int)FG_DTYPE_F16 || (int)r->cls.dtype > (int)FG_DTYPE_E5M2 || r->cls.dtype == FG_DTYPE_F32)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "class dtype %d is not a Q/K/V element type", (int)r->cls.dtype);
    if (r->cls.head_dim < 1 || r->cls.gqa < 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "class %s: head_dim and gqa must be at least 1", cls);
    if (s->block_m <= 0 || s->block_n <= 0 || s->warps <= 0 || s->stages <= 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "spec %s has unset tile fields: a measured candidate is a complete variant", r->name);
    const char *differs = s->kind != r->cls.kind         ? "kind"
                          : s->dtype != r->cls.dtype       ? "dtype"
                          : s->head_dim != r->cls.head_dim ? "head_dim"
                          : (s->causal != 0) != r->cls.causal ? "causal"
                                                             : NULL;
    if (differs)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec %s does not belong to class %s: its %s differs", r->name,
                       cls, differs);
    if (s->arch != db->id.arch)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "spec %s targets sm_%d, but this tuning database is for sm_%d (%s): dispatch never runs it here",
                       r->name, s->arch, db->id.arch, db->id.device);
    if ((unsigned)r->status >= FG_TUNE_STATUS_COUNT)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "record status %d is not a tuning status", (int)r->status);
    if (!isfinite(r->ms) || r->ms < 0 || !isfinite(r->tflops) || r->tflops < 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec %s: ms (%g) and tflops (%g) must be finite and not negative",
                       r->name, r->ms, r->tflops);
    if (r->status == FG_TUNE_OK && r->ms <= 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec %s has status ok but no time (ms %g): an ok record was timed",
                       r->name, r->ms);
    return FG_OK;
}

/* Builds the stored form of rec (bucketed, named, note terminated) into *out and checks it. */
static fg_status tdb_prepare(const fg_tunedb *db, const fg_tune_record *rec, fg_tune_record *out, fg_error *err) {
    *out = *rec;
    out->cls = tdb_bucketed(&rec->cls);
    out->spec.causal = rec->spec.causal != 0;
    out->note[FG_TUNE_NOTE_MAX - 1] = '\0';
    if (spec_format(&out->spec, out->name, sizeof out->name) < 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the record's spec (arch %d) has no canonical text", rec->spec.arch);
    return tdb_check(db, out, err);
}

fg_status tunedb_add(fg_tunedb *db, const fg_tune_record *rec, fg_error *err) {
    if (db == NULL || rec == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "tunedb_add: the database and the record must not be NULL");
    fg_tune_record r;
    fg_status st = tdb_prepare(db, rec, &r, err);
    if (st != FG_OK)
        return st;
    int found;
    int at = tdb_find(db, &r.cls, r.name, &found);
    if (found) {
        db->records[at] = r;
        return FG_OK;
    }
    if (db->count == db->cap) {
        if (db->cap > INT_MAX / 2)
            return fg_fail(err, FG_ERR_NO_MEMORY, "the tuning database cannot hold more than %d records", db->cap);
        int cap = db->cap ? db->cap * 2 : 64;
        fg_tune_record *grown = fg_realloc(db->records, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory growing the tuning database to %d records", cap);
        db->records = grown;
        db->cap = cap;
    }
    memmove(&db->records[at + 1], &db->records[at], (size_t)(db->count - at) * sizeof r);
    db->records[at] = r;
    db->count++;
    return FG_OK;
}

int tunedb_has(const fg_tunedb *db, const fg_tune_class *cls, const fg_spec *spec) {
    if (db == NULL || cls == NULL || spec == NULL)
        return 0;
    fg_tune_class b = tdb_bucketed(cls);
    fg_spec s = *spec;
    s.causal = s.causal != 0;
    char name[FG_SPEC_NAME_MAX];
    if (spec_format(&s, name, sizeof name) < 0)
        return 0;
    int found;
    tdb_find(db, &b, name, &found);
    return found;
}

/* ------------------------------------------------------------------ the winner */

/* log2 of a power of two. */
static int tdb_log2(int64_t v) {
    int k = 0;
    while (v > 1) {
        v >>= 1;
        k++;
    }
    return k;
}

/* Sum of |log2 differences| of the three buckets of a and b. */
static int tdb_distance(const fg_tune_class *a, const fg_tune_class *b) {
    return abs(tdb_log2(a->seqlen_q) - tdb_log2(b->seqlen_q)) + abs(tdb_log2(a->seqlen_k) - tdb_log2(b->seqlen_k)) +
           abs(tdb_log2(a->batch_heads) - tdb_log2(b->batch_heads));
}

fg_status tunedb_best(const fg_tunedb *db, const fg_tune_class *query, fg_spec *spec, fg_tune_record *rec,
                      char *why, size_t nwhy) {
    return tunedb_best_for(db, query, -1, spec, rec, why, nwhy);
}

/* The work a tile does for lengths sq x sk, over the work the lengths need: query blocks of block_m rows and
 * key blocks of block_n keys are done whole, the last ones padded (a kernel spends the same time on a block
 * of 48 keys as on one of 80). 1 where the tiles divide the lengths. */
static double tdb_padding(const fg_spec *s, int64_t sq, int64_t sk) {
    if (s->block_m <= 0 || s->block_n <= 0 || sq <= 0 || sk <= 0) return 1.0;
    const double pq = (double)((sq + s->block_m - 1) / s->block_m * s->block_m) / (double)sq;
    const double pk = (double)((sk + s->block_n - 1) / s->block_n * s->block_n) / (double)sk;
    return pq * pk;
}

/* The predicted time of record r at the query's lengths, in r's units: its time at its bucket, scaled by how
 * much more (or less) padding its tiles do on the query's lengths. The buckets are powers of two, which
 * 128-row tiles divide and 80-, 160- or 192-row ones do not; without this a 160-key tile that won at 2048
 * keys (1.6% padding) would run at 1024 (9.4%) or 512 (25%) unchallenged. Dispatch passes the call's lengths
 * rounded up to their buckets (select_problem_class, which keys its last-call cache too), so a call of 1000
 * keys is ranked as one of 1024. */
static double tdb_predicted_ms(const fg_tune_record *r, const fg_tune_class *query) {
    return r->ms * tdb_padding(&r->spec, query->seqlen_q, query->seqlen_k) /
           tdb_padding(&r->spec, r->cls.seqlen_q, r->cls.seqlen_k);
}

/* tunedb_best_for for the query's dtype `dt`. */
static fg_status tdb_best_dtype(const fg_tunedb *db, const fg_tune_class *query, fg_dtype dt, int accel, fg_spec *spec,
                                fg_tune_record *rec, int *family_out, char *why, size_t nwhy) {
    fg_tune_class q = tdb_bucketed(query);
    q.dtype = dt;
    char fam[200];
    tunedb_class_text(&q, 0, fam, sizeof fam);
    /* The nearest bucket that has a passing candidate. Records are sorted by class, so within one
     * distance the first bucket met is the smaller one. */
    const fg_tune_record *near = NULL;
    int near_d = INT_MAX, family = 0;
    for (int i = 0; i < db->count; i++) {
        const fg_tune_record *r = &db->records[i];
        if (!tdb_same_family(&r->cls, &q) || (accel >= 0 && r->spec.arch_accel != accel))
            continue;
        family++;
        if (r->status != FG_TUNE_OK)
            continue;
        int d = tdb_distance(&r->cls, &q);
        if (d < near_d) {
            near = r;
            near_d = d;
        }
    }
    *family_out = family;
    if (near == NULL) {
        if (family == 0)
            snprintf(why, nwhy, "not tuned: the tuning database has no result for %s", fam);
        else
            snprintf(why, nwhy, "not tuned: %d candidate%s measured for %s, none passed", family,
                     family == 1 ? " was" : "s were", fam);
        return FG_ERR_NOT_FOUND;
    }
    /* The winner of that bucket, among the records of the family asked for (accel >= 0) only: the other
     * family's may be faster there, but dispatch cannot run it for this call. Ranked by the time predicted
     * for the query's lengths (tdb_predicted_ms), the bucket's own where the tiles pad both alike. */
    const fg_tune_record *win = NULL, *fastest = NULL;
    int measured = 0;
    for (int i = 0; i < db->count; i++) {
        const fg_tune_record *r = &db->records[i];
        if (!tdb_same_family(&r->cls, &q) || !tdb_same_bucket(&r->cls, &near->cls) ||
            (accel >= 0 && r->spec.arch_accel != accel))
            continue;
        measured++;
        if (r->status != FG_TUNE_OK)
            continue;
        if (win == NULL || tdb_predicted_ms(r, query) < tdb_predicted_ms(win, query)) /* name order breaks ties */
            win = r;
        if (fastest == NULL || r->ms < fastest->ms)
            fastest = r;
    }
    *spec = win->spec;
    if (rec)
        *rec = *win;
    const fg_tune_class *c = &win->cls;
    char pad[96] = "";
    if (win != fastest)
        snprintf(pad, sizeof pad, " (its %d x %d tiles pad this problem's lengths less than the bucket's fastest)",
                 win->spec.block_m, win->spec.block_n);
    if (near_d == 0)
        snprintf(why, nwhy, "tuned: bucket sq %lld sk %lld bh %lld, %.3g ms, %d candidate%s measured%s",
                 (long long)c->seqlen_q, (long long)c->seqlen_k, (long long)c->batch_heads, win->ms, measured,
                 measured == 1 ? "" : "s", pad);
    else
        snprintf(why, nwhy,
                 "tuned: nearest bucket sq %lld sk %lld bh %lld (this problem: sq %lld sk %lld bh %lld), %.3g ms, "
                 "%d candidate%s measured%s",
                 (long long)c->seqlen_q, (long long)c->seqlen_k, (long long)c->batch_heads, (long long)q.seqlen_q,
                 (long long)q.seqlen_k, (long long)q.batch_heads, win->ms, measured, measured == 1 ? "" : "s", pad);
    return FG_OK;
}

fg_status tunedb_best_for(const fg_tunedb *db, const fg_tune_class *query, int accel, fg_spec *spec,
                          fg_tune_record *rec, char *why, size_t nwhy) {
    char scratch[8];
    if (why == NULL || nwhy == 0) { /* one path for the sentences below, written nowhere */
        why = scratch;
        nwhy = sizeof scratch;
    }
    why[0] = '\0';
    if (query == NULL || spec == NULL) {
        snprintf(why, nwhy, "not tuned: no problem class was given");
        return FG_ERR_NOT_FOUND;
    }
    if (db == NULL || db->count == 0) {
        snprintf(why, nwhy, "not tuned: no tuning database for this GPU (or it is empty)");
        return FG_ERR_NOT_FOUND;
    }
    int family = 0;
    fg_status st = tdb_best_dtype(db, query, query->dtype, accel, spec, rec, &family, why, nwhy);
    /* fp16 and bf16 run the same kernels (the same instructions, at the same rate): a family tuned in one
     * serves the other where that one has no result at all (a sweep of one 16-bit type, as `flashgen tune`
     * of a one-dtype space makes). */
    const fg_dtype other = query->dtype == FG_DTYPE_F16 ? FG_DTYPE_BF16 : query->dtype == FG_DTYPE_BF16 ? FG_DTYPE_F16
                                                                                                      : query->dtype;
    if (st == FG_ERR_NOT_FOUND && family == 0 && other != query->dtype) {
        char w2[512];
        int f2 = 0;
        if (tdb_best_dtype(db, query, other, accel, spec, rec, &f2, w2, sizeof w2) == FG_OK) {
            if (spec->dtype == other) spec->dtype = query->dtype;
            if (spec->out_dtype == other) spec->out_dtype = query->dtype;
            if (rec) { /* the record as it serves this call: the query's dtype, its spec and name to match */
                rec->spec = *spec;
                rec->cls.dtype = query->dtype;
                if (spec_format(spec, rec->name, sizeof rec->name) < 0) rec->name[0] = '\0';
            }
            snprintf(why, nwhy, "%s, %s's (%s has no result; the two run the same kernels)", w2,
                     dtype_name(other), dtype_name(query->dtype));
            return FG_OK;
        }
    }
    return st;
}
