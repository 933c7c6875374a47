/* tunedb.c: the per-GPU tuning database (see tunedb.h): records in memory, the winner lookup, and the
 * Lua-table file, written deterministically and read back through the config sandbox.
 *
 * Records stay sorted by (class, spec name), so lookups by key are binary searches, a save needs no
 * sort, and the file's order is a function of its contents alone. The reader trusts nothing: the header
 * is checked against the caller's GPU before any result is read, every field is type- and range-checked
 * at its line, every record goes through the same consistency checks as tunedb_add, and the number of
 * results must equal what the header promises, so a file cut short anywhere is refused as a whole. */
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
static int tdb_class_cmp(const fg_tune_class *a, const fg_tune_class *b) {
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

/* The name a class's kind has in the file and the tables: "fwd" or "bwd". */
static const char *tdb_kind_name(fg_kind k) {
    return k == FG_KIND_FWD ? "fwd" : k == FG_KIND_BWD ? "bwd" : "unknown-kind";
}

/* "fwd bf16 head_dim 128 causal gqa 1" (family only) or with " sq 2048 sk 2048 bh 128" (buckets too). */
static void tdb_class_text(const fg_tune_class *c, int buckets, char *buf, size_t n) {
    int w = snprintf(buf, n, "%s %s head_dim %d %s gqa %d", tdb_kind_name(c->kind),
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
        int c = tdb_class_cmp(&r->cls, cls);
        if (c == 0)
            c = strcmp(r->name, name);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < db->count && tdb_class_cmp(&db->records[lo].cls, cls) == 0 && strcmp(db->records[lo].name, name) == 0;
    return lo;
}

/* The consistency rules of a record r (class already bucketed, name filled) for database db. */
static fg_status tdb_check(const fg_tunedb *db, const fg_tune_record *r, fg_error *err) {
    char cls[200];
    tdb_class_text(&r->cls, 0, cls, sizeof cls);
    const fg_spec *s = &r->spec;
    if (r->cls.kind != FG_KIND_FWD && r->cls.kind != FG_KIND_BWD)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "class kind %d is not a kernel family (fwd, bwd)", (int)r->cls.kind);
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
        fg_tune_record *grown = realloc(db->records, (size_t)cap * sizeof *grown);
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
    tdb_class_text(&q, 0, fam, sizeof fam);
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

/* ------------------------------------------------------------------ writing the file */

/* A growing text buffer; the first allocation failure sets oom and later appends do nothing. */
typedef struct tdb_text {
    char *p;    /* the text, NUL-terminated while not oom */
    size_t len; /* bytes used */
    size_t cap; /* bytes allocated */
    int oom;    /* an allocation failed: the text is incomplete */
} tdb_text;

/* Makes room for `more` bytes plus a NUL. Returns 0, or -1 (and sets oom). */
static int tx_reserve(tdb_text *t, size_t more) {
    if (t->oom)
        return -1;
    if (t->len + more + 1 <= t->cap)
        return 0;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + more + 1) {
        if (cap > SIZE_MAX / 2) {
            t->oom = 1;
            return -1;
        }
        cap *= 2;
    }
    char *p = realloc(t->p, cap);
    if (p == NULL) {
        t->oom = 1;
        return -1;
    }
    t->p = p;
    t->cap = cap;
    return 0;
}

static void tx_printf(tdb_text *t, const char *fmt, ...) FG_PRINTF(2, 3);
static void tx_printf(tdb_text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->oom = 1; /* an encoding error cannot happen with these formats; fail closed if it does */
        return;
    }
    if (tx_reserve(t, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(t->p + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* Appends n bytes as they are. */
static void tx_raw(tdb_text *t, const char *p, size_t n) {
    if (tx_reserve(t, n) != 0)
        return;
    memcpy(t->p + t->len, p, n);
    t->len += n;
    t->p[t->len] = '\0';
}

/* s as a Lua string literal: quotes and backslashes escaped, control bytes as three-digit \ddd (so a
 * following digit cannot join the escape); other bytes, UTF-8 included, as they are. */
static void tx_string(tdb_text *t, const char *s) {
    tx_raw(t, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t run = 0; /* bytes that need no escape, copied at once */
        while (p[run] && p[run] != '"' && p[run] != '\\' && p[run] >= 0x20 && p[run] != 0x7f)
            run++;
        tx_raw(t, (const char *)p, run);
        p += run;
        if (*p == '"' || *p == '\\') {
            tx_printf(t, "\\%c", *p);
            p++;
        } else if (*p) {
            tx_printf(t, "\\%03u", (unsigned)*p);
            p++;
        }
    }
    tx_raw(t, "\"", 1);
}

/* v in few significant digits that read back as exactly v (17 always do), so a load and a save
 * reproduce the file byte for byte. Reading back exactly only gets easier with more digits, so a binary
 * search finds the shortest in about five tries. A locale with a decimal comma is undone: Lua reads '.'
 * in every locale. */
static void tx_number(tdb_text *t, double v) {
    char buf[320]; /* %.17g needs 24 bytes; the compiler's bound for %g is 310 */
    int lo = 1, hi = 17;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        snprintf(buf, sizeof buf, "%.*g", mid, v);
        if (strtod(buf, NULL) == v)
            hi = mid;
        else
            lo = mid + 1;
    }
    snprintf(buf, sizeof buf, "%.*g", lo, v);
    for (char *p = buf; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == '-' || *p == '+' || *p == 'e' || *p == 'E'))
            *p = '.';
    tx_printf(t, "%s", buf);
}

fg_status tunedb_save(const char *path, const fg_tunedb *db, fg_error *err) {
    if (path == NULL || db == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "tunedb_save: the path and the database must not be NULL");
    tdb_text t = {0};
    tx_printf(&t, "-- flashgen tuning database (format %d): every candidate `flashgen tune` measured on one GPU.\n"
                  "-- Written by flashgen and read back through its config sandbox; `flashgen tune --show` prints it\n"
                  "-- as a table. A file for another GPU, driver, NVRTC or flashgen version is ignored.\n",
              FG_TUNEDB_FORMAT_VERSION);
    tx_printf(&t, "tuning {\n    format = %d, results = %d,\n    gpu = { name = ", FG_TUNEDB_FORMAT_VERSION, db->count);
    tx_string(&t, db->id.device);
    tx_printf(&t, ", arch = %d, sms = %d, driver = %d, nvrtc = ", db->id.arch, db->id.sm_count, db->id.driver_version);
    tx_string(&t, db->id.nvrtc);
    tx_printf(&t, ", flashgen = ");
    tx_string(&t, db->id.flashgen);
    tx_printf(&t, " },\n}\n");
    for (int i = 0; i < db->count; i++) {
        const fg_tune_record *r = &db->records[i];
        const fg_tune_class *c = &r->cls;
        tx_printf(&t,
                  "result { kind = \"%s\", dtype = \"%s\", head_dim = %d, causal = %s, gqa = %d, seqlen_q = %lld, "
                  "seqlen_k = %lld, batch_heads = %lld, spec = \"%s\", status = \"%s\", ms = ",
                  tdb_kind_name(c->kind), dtype_name(c->dtype), c->head_dim, c->causal ? "true" : "false", c->gqa,
                  (long long)c->seqlen_q, (long long)c->seqlen_k, (long long)c->batch_heads, r->name,
                  tunedb_status_name(r->status));
        tx_number(&t, r->ms);
        tx_printf(&t, ", tflops = ");
        tx_number(&t, r->tflops);
        tx_printf(&t, ", note = ");
        tx_string(&t, r->note);
        tx_printf(&t, " }\n");
    }
    if (t.oom) {
        free(t.p);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory rendering the tuning database for '%s'", path);
    }
    fg_status st = fg_write_file_atomic(path, t.p, t.len, err);
    free(t.p);
    return st;
}

/* ------------------------------------------------------------------ Lua argument helpers */

/* " (list item N)" for list positions, "" for scalars. */
static const char *tdb_at(int pos, char *buf, size_t n) {
    if (pos > 0)
        snprintf(buf, n, " (list item %d)", pos);
    else if (n > 0)
        buf[0] = '\0';
    return buf;
}

long long tunedb_lua_int(lua_State *L, int idx, const char *fn, const char *field, int pos, long long lo,
                         long long hi) {
    char got[64], at[32];
    int isint = 0;
    lua_Integer v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &isint) : 0;
    if (!isint)
        lua_sandbox_raise(L, fn, "field '%s' must be an integer, got %s%s", field, lua_sandbox_describe(L, idx, got, sizeof got),
                         tdb_at(pos, at, sizeof at));
    if (v < lo || v > hi)
        lua_sandbox_raise(L, fn, "field '%s' must be an integer from %lld to %lld, got %lld%s", field, lo, hi,
                         (long long)v, tdb_at(pos, at, sizeof at));
    return (long long)v;
}

int tunedb_lua_bool(lua_State *L, int idx, const char *fn, const char *field, int pos) {
    char got[64], at[32];
    if (lua_type(L, idx) == LUA_TBOOLEAN)
        return lua_toboolean(L, idx);
    if (lua_type(L, idx) == LUA_TNUMBER && lua_isinteger(L, idx) &&
        (lua_tointeger(L, idx) == 0 || lua_tointeger(L, idx) == 1))
        return (int)lua_tointeger(L, idx);
    lua_sandbox_raise(L, fn, "field '%s' must be a boolean (or 0/1), got %s%s", field, lua_sandbox_describe(L, idx, got, sizeof got),
                     tdb_at(pos, at, sizeof at));
    return 0;
}

const char *tunedb_lua_string(lua_State *L, int idx, const char *fn, const char *field, int pos, size_t maxlen) {
    char got[64], at[32];
    if (lua_type(L, idx) != LUA_TSTRING) /* numbers are not names, though Lua could convert them */
        lua_sandbox_raise(L, fn, "field '%s' must be a string, got %s%s", field, lua_sandbox_describe(L, idx, got, sizeof got),
                         tdb_at(pos, at, sizeof at));
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (len > maxlen)
        lua_sandbox_raise(L, fn, "field '%s' is %zu bytes long; at most %zu are allowed%s", field, len, maxlen,
                         tdb_at(pos, at, sizeof at));
    if (strlen(s) != len)
        lua_sandbox_raise(L, fn, "field '%s' contains a NUL byte%s", field, tdb_at(pos, at, sizeof at));
    return s;
}

/* ------------------------------------------------------------------ reading the file */

/* What the host functions build while a database file runs. */
typedef struct tdb_loader {
    const fg_tune_identity *expected; /* the caller's GPU, or NULL to accept any */
    fg_tunedb db;                     /* the records read so far (identity from the header) */
    int header_line;                  /* line of the tuning{} call; 0 until it ran */
    long long promised;               /* the header's result count */
    long long seen;                   /* result{} calls so far */
    char refusal[900];                /* why the header refuses the file (format or identity), or "" */
    fg_status hard;                   /* FG_ERR_NO_MEMORY when a record could not be stored, else FG_OK */
} tdb_loader;

/* Pushes field `field` of the table at tab; raises if it is absent. Returns its (absolute) index. */
static int tdb_required(lua_State *L, int tab, const char *fn, const char *field) {
    lua_pushstring(L, field);
    lua_rawget(L, tab);
    if (lua_isnil(L, -1))
        lua_sandbox_raise(L, fn, "field '%s' is required", field);
    return lua_gettop(L);
}

/* The line of the Lua code calling the running host function (0 if unknown). */
static int tdb_call_line(lua_State *L) {
    lua_Debug ar;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "l", &ar) && ar.currentline > 0)
        return ar.currentline;
    return 0;
}

/* Appends "; <what> X (this GPU: Y)" to buf for one differing identity field. */
static void tdb_note_diff(char *buf, size_t n, const char *what, const char *found, const char *here) {
    size_t used = strlen(buf);
    if (used < n)
        snprintf(buf + used, n - used, "%s%s %s (%s: %s)", used ? "; " : "", what, found,
                 strcmp(what, "flashgen") == 0 ? "this build" : "this GPU", here);
}

/* tuning { format = N, results = N, gpu = { ... } }: the header. The format is read before anything
 * else, so a newer layout is refused as such rather than as unknown fields. */
static int tdb_tuning(lua_State *L) {
    static const char fn[] = "tuning";
    static const char *const fields[] = {"format", "results", "gpu", NULL};
    static const char *const gpu_fields[] = {"name", "arch", "sms", "driver", "nvrtc", "flashgen", NULL};
    tdb_loader *ld = lua_touserdata(L, lua_upvalueindex(1));
    luaL_checkstack(L, 32, "tuning header"); /* each field read stays on the stack until the call returns */
    if (ld->header_line)
        lua_sandbox_raise(L, fn, "the header appears twice (first at line %d)", ld->header_line);
    char got[64];
    if (lua_gettop(L) != 1 || lua_type(L, 1) != LUA_TTABLE)
        lua_sandbox_raise(L, fn, "expects one table argument, got %s", lua_gettop(L) ? lua_sandbox_describe(L, 1, got, sizeof got) : "no value");
    long long format = tunedb_lua_int(L, tdb_required(L, 1, fn, "format"), fn, "format", 0, 1, INT_MAX);
    if (format != FG_TUNEDB_FORMAT_VERSION) {
        snprintf(ld->refusal, sizeof ld->refusal, "tuning database format %lld; this flashgen (%s) reads format %d",
                 format, FG_VERSION_STRING, FG_TUNEDB_FORMAT_VERSION);
        lua_sandbox_raise(L, fn, "%s", ld->refusal);
    }
    lua_settop(L, 1);
    lua_sandbox_check_table(L, 1, fn, NULL, fields);
    ld->promised = tunedb_lua_int(L, tdb_required(L, 1, fn, "results"), fn, "results", 0, 0, INT_MAX);
    int gpu = tdb_required(L, 1, fn, "gpu");
    lua_sandbox_check_table(L, gpu, fn, "gpu", gpu_fields);
    fg_tune_identity id;
    memset(&id, 0, sizeof id);
    snprintf(id.device, sizeof id.device, "%s",
             tunedb_lua_string(L, tdb_required(L, gpu, fn, "name"), fn, "gpu.name", 0, sizeof id.device - 1));
    id.arch = (int)tunedb_lua_int(L, tdb_required(L, gpu, fn, "arch"), fn, "gpu.arch", 0, 1, INT_MAX);
    id.sm_count = (int)tunedb_lua_int(L, tdb_required(L, gpu, fn, "sms"), fn, "gpu.sms", 0, 1, INT_MAX);
    id.driver_version = (int)tunedb_lua_int(L, tdb_required(L, gpu, fn, "driver"), fn, "gpu.driver", 0, 0, INT_MAX);
    snprintf(id.nvrtc, sizeof id.nvrtc, "%s",
             tunedb_lua_string(L, tdb_required(L, gpu, fn, "nvrtc"), fn, "gpu.nvrtc", 0, sizeof id.nvrtc - 1));
    snprintf(id.flashgen, sizeof id.flashgen, "%s",
             tunedb_lua_string(L, tdb_required(L, gpu, fn, "flashgen"), fn, "gpu.flashgen", 0, sizeof id.flashgen - 1));
    const fg_tune_identity *want = ld->expected;
    if (want) {
        char diff[800] = "", a[300], b[300];
        if (strcmp(id.device, want->device) != 0) {
            snprintf(a, sizeof a, "\"%s\"", id.device);
            snprintf(b, sizeof b, "\"%s\"", want->device);
            tdb_note_diff(diff, sizeof diff, "device", a, b);
        }
        const struct { const char *what, *fmt; int found, here; } ints[3] = {
            {"compute capability", "sm_%d", id.arch, want->arch},
            {"SM count", "%d", id.sm_count, want->sm_count},
            {"CUDA driver version", "%d", id.driver_version, want->driver_version},
        };
        for (int i = 0; i < 3; i++)
            if (ints[i].found != ints[i].here) {
                snprintf(a, sizeof a, ints[i].fmt, ints[i].found);
                snprintf(b, sizeof b, ints[i].fmt, ints[i].here);
                tdb_note_diff(diff, sizeof diff, ints[i].what, a, b);
            }
        if (strcmp(id.nvrtc, want->nvrtc) != 0)
            tdb_note_diff(diff, sizeof diff, "NVRTC", id.nvrtc, want->nvrtc);
        if (strcmp(id.flashgen, want->flashgen) != 0)
            tdb_note_diff(diff, sizeof diff, "flashgen", id.flashgen, want->flashgen);
        if (diff[0]) {
            snprintf(ld->refusal, sizeof ld->refusal,
                     "made for another GPU or software version, so it is not used: %s", diff);
            lua_sandbox_raise(L, fn, "%s", ld->refusal);
        }
    }
    ld->db.id = id;
    ld->header_line = tdb_call_line(L);
    return 0;
}

/* Reads a bucket field: a power of two from 1 to 2^62. */
static int64_t tdb_read_bucket(lua_State *L, int tab, const char *fn, const char *field) {
    long long v = tunedb_lua_int(L, tdb_required(L, tab, fn, field), fn, field, 0, 1, TDB_BUCKET_MAX);
    if ((v & (v - 1)) != 0)
        lua_sandbox_raise(L, fn, "field '%s' must be a power of two (a bucket), got %lld", field, v);
    return (int64_t)v;
}

/* Reads a time field: a finite number, not negative. */
static double tdb_read_number(lua_State *L, int tab, const char *fn, const char *field) {
    char got[64];
    int idx = tdb_required(L, tab, fn, field);
    if (lua_type(L, idx) != LUA_TNUMBER)
        lua_sandbox_raise(L, fn, "field '%s' must be a number, got %s", field, lua_sandbox_describe(L, idx, got, sizeof got));
    double v = (double)lua_tonumber(L, idx);
    if (!isfinite(v) || v < 0)
        lua_sandbox_raise(L, fn, "field '%s' must be a finite number, not negative, got %g", field, v);
    return v;
}

/* result { ... }: one measured candidate. Every field is required; the record must pass tunedb_add's
 * checks and must not repeat an earlier (class, spec). */
static int tdb_result(lua_State *L) {
    static const char fn[] = "result";
    static const char *const fields[] = {"kind",  "dtype",  "head_dim", "causal", "gqa", "seqlen_q", "seqlen_k",
                                         "batch_heads", "spec", "status", "ms", "tflops", "note", NULL};
    tdb_loader *ld = lua_touserdata(L, lua_upvalueindex(1));
    luaL_checkstack(L, 32, "result record"); /* each field read stays on the stack until the call returns */
    if (!ld->header_line)
        lua_sandbox_raise(L, fn, "the tuning { ... } header must come before any result");
    lua_sandbox_check_table(L, 1, fn, NULL, fields);
    fg_tune_record r;
    memset(&r, 0, sizeof r);
    fg_error e;
    fg_error_clear(&e);
    const char *kind = tunedb_lua_string(L, tdb_required(L, 1, fn, "kind"), fn, "kind", 0, 32);
    if (strcmp(kind, "fwd") != 0 && strcmp(kind, "bwd") != 0)
        lua_sandbox_raise(L, fn, "field 'kind' must name a kernel family (\"fwd\" or \"bwd\"), got \"%s\"", kind);
    r.cls.kind = strcmp(kind, "bwd") == 0 ? FG_KIND_BWD : FG_KIND_FWD;
    const char *dtype = tunedb_lua_string(L, tdb_required(L, 1, fn, "dtype"), fn, "dtype", 0, 32);
    if (dtype_parse(dtype, &r.cls.dtype, &e) != FG_OK)
        lua_sandbox_raise(L, fn, "field 'dtype': %s", e.msg);
    r.cls.head_dim = (int)tunedb_lua_int(L, tdb_required(L, 1, fn, "head_dim"), fn, "head_dim", 0, 1, INT_MAX);
    r.cls.causal = tunedb_lua_bool(L, tdb_required(L, 1, fn, "causal"), fn, "causal", 0);
    r.cls.gqa = (int)tunedb_lua_int(L, tdb_required(L, 1, fn, "gqa"), fn, "gqa", 0, 1, INT_MAX);
    r.cls.seqlen_q = tdb_read_bucket(L, 1, fn, "seqlen_q");
    r.cls.seqlen_k = tdb_read_bucket(L, 1, fn, "seqlen_k");
    r.cls.batch_heads = tdb_read_bucket(L, 1, fn, "batch_heads");
    const char *spec = tunedb_lua_string(L, tdb_required(L, 1, fn, "spec"), fn, "spec", 0, 4 * FG_SPEC_NAME_MAX);
    if (spec_parse(spec, &r.spec, &e) != FG_OK)
        lua_sandbox_raise(L, fn, "field 'spec': %s", e.msg);
    const char *status = tunedb_lua_string(L, tdb_required(L, 1, fn, "status"), fn, "status", 0, 32);
    if (tunedb_status_parse(status, &r.status, &e) != FG_OK)
        lua_sandbox_raise(L, fn, "field 'status': %s", e.msg);
    r.ms = tdb_read_number(L, 1, fn, "ms");
    r.tflops = tdb_read_number(L, 1, fn, "tflops");
    snprintf(r.note, sizeof r.note, "%s",
             tunedb_lua_string(L, tdb_required(L, 1, fn, "note"), fn, "note", 0, TDB_NOTE_READ_MAX));
    if (tunedb_has(&ld->db, &r.cls, &r.spec)) {
        char cls[200];
        tdb_class_text(&r.cls, 1, cls, sizeof cls);
        lua_sandbox_raise(L, fn, "spec %s appears twice for class %s", spec, cls);
    }
    if (tunedb_add(&ld->db, &r, &e) != FG_OK) {
        if (e.status == FG_ERR_NO_MEMORY)
            ld->hard = FG_ERR_NO_MEMORY;
        lua_sandbox_raise(L, fn, "%s", e.msg);
    }
    ld->seen++;
    return 0;
}

/* Sandbox setup: installs tuning and result bound to the loader. */
static int tdb_setup(lua_State *L, void *user) {
    lua_sandbox_bind(L, "tuning", tdb_tuning, user);
    lua_sandbox_bind(L, "result", tdb_result, user);
    return 0;
}

fg_status tunedb_load(const char *path, const fg_tune_identity *expected, fg_tunedb *db, fg_error *err) {
    if (db == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "tunedb_load: the database pointer must not be NULL");
    tunedb_init(db, expected);
    if (path == NULL || path[0] == '\0')
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "tunedb_load: the path must not be empty");
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return fg_fail(err, FG_ERR_NOT_FOUND, "no tuning database at '%s'", path);
    tdb_loader *ld = calloc(1, sizeof *ld);
    if (ld == NULL)
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory loading the tuning database '%s'", path);
    ld->expected = expected;
    tunedb_init(&ld->db, expected);
    fg_error e;
    fg_error_clear(&e);
    fg_status st = lua_sandbox_run_file(path, tdb_setup, NULL, ld, &e);
    if (st != FG_OK) {
        if (ld->refusal[0])
            st = fg_fail(err, FG_ERR_FORMAT, "%s: %s", path, ld->refusal);
        else if (ld->hard != FG_OK)
            st = fg_fail(err, ld->hard, "%s", e.msg);
        else /* a Lua error (syntax, a field, a limit) means the file is not a valid database */
            st = fg_fail(err, st == FG_ERR_CONFIG ? FG_ERR_FORMAT : st, "%s", e.msg);
    } else if (!ld->header_line) {
        st = fg_fail(err, FG_ERR_FORMAT, "%s: not a tuning database: it has no tuning { format = ..., gpu = ... } header",
                     path);
    } else if (ld->seen != ld->promised) {
        st = fg_fail(err, FG_ERR_FORMAT,
                     "%s: the header promises %lld results but the file holds %lld: it was cut short or edited", path,
                     ld->promised, ld->seen);
    }
    if (st == FG_OK)
        *db = ld->db;
    else
        tunedb_free(&ld->db);
    free(ld);
    return st;
}

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
    const fg_tune_record **row = malloc((size_t)(db->count ? db->count : 1) * sizeof *row);
    if (row == NULL) {
        fg_fail(err, FG_ERR_NO_MEMORY, "out of memory sorting %d tuning records for display", db->count);
        return NULL;
    }
    for (int i = 0; i < db->count;) {
        int j = i;
        while (j < db->count && tdb_class_cmp(&db->records[j].cls, &db->records[i].cls) == 0) {
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
        classes += i == 0 || tdb_class_cmp(&db->records[i].cls, &db->records[i - 1].cls) != 0;
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
        while (j < db->count && tdb_class_cmp(&row[j]->cls, &row[i]->cls) == 0) {
            nok += row[j]->status == FG_TUNE_OK;
            if (!dflt && tdb_is_default(row[j], &policy)) dflt = row[j];
            j++;
        }
        char cls[200];
        tdb_class_text(&row[i]->cls, 1, cls, sizeof cls);
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

/* Writes text as one quoted CSV field: a quote inside is doubled (RFC 4180), control bytes become spaces
 * so a record stays one line. */
static void tdb_csv_field(FILE *out, const char *text) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"') fputc('"', out);
        fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, out);
    }
    fputc('"', out);
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
        int first = i == 0 || tdb_class_cmp(&row[i - 1]->cls, &r->cls) != 0;
        tdb_csv_field(out, db->id.device);
        fprintf(out, ",%s,%s,%d,%d,%d,%lld,%lld,%lld,%d,%d,%d,%d,%s,%.6g,%.6g,%d,%d,", tdb_kind_name(r->cls.kind),
                dtype_name(r->cls.dtype), r->cls.head_dim, r->cls.causal, r->cls.gqa, (long long)r->cls.seqlen_q,
                (long long)r->cls.seqlen_k, (long long)r->cls.batch_heads, r->spec.block_m, r->spec.block_n,
                r->spec.warps, r->spec.stages, tunedb_status_name(r->status), r->ms, r->tflops,
                first && r->status == FG_TUNE_OK, tdb_is_default(r, &policy));
        tdb_csv_field(out, r->note);
        fputc('\n', out);
    }
    free(row);
    tile_policy_free(&policy);
    return tdb_flush(out, err);
}
