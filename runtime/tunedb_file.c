/* tunedb_file.c: the tuning database's file (see tunedb.h): written deterministically as Lua-table text,
 * read back through the config sandbox. The reader trusts nothing: the header is checked against the
 * caller's GPU before any result is read, every field is type- and range-checked at its line, every
 * record goes through the same consistency checks as tunedb_add, and the number of results must equal
 * what the header promises, so a file cut short anywhere is refused as a whole. */
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
    char *p = fg_realloc(t->p, cap);
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
                  tunedb_kind_name(c->kind), dtype_name(c->dtype), c->head_dim, c->causal ? "true" : "false", c->gqa,
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
    if (strcmp(kind, "fwd") != 0 && strcmp(kind, "bwd") != 0 && strcmp(kind, "serve") != 0)
        lua_sandbox_raise(L, fn, "field 'kind' must name a kernel family (\"fwd\", \"bwd\" or \"serve\"), got \"%s\"",
                          kind);
    r.cls.kind = strcmp(kind, "bwd") == 0 ? FG_KIND_BWD : strcmp(kind, "serve") == 0 ? FG_KIND_SERVE : FG_KIND_FWD;
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
        tunedb_class_text(&r.cls, 1, cls, sizeof cls);
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
    tdb_loader *ld = fg_calloc(1, sizeof *ld);
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
