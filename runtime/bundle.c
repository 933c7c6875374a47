/* bundle.c: ahead-of-time kernel bundles: writing them (as a file or as C source) and reading them back
 * (format in bundle.h).
 *
 * A bundle comes from outside the process (a file on disk, bytes linked into an application), and what
 * it carries is machine code the GPU will run, so the reader believes nothing: every length and offset is
 * checked against the bytes actually present using arithmetic that cannot overflow, the index is
 * checksummed as a whole, each payload separately, names must be sane, unique and sorted, and payloads
 * must tile the rest of the file exactly. The writer produces exactly that canonical layout, so
 * serializing the same entries always gives the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/bundle.h"
#include "core/little_endian.h"
#include "runtime/cache.h"
#include "generator/emit.h"
#include "core/sha256.h"
#include "core/alloc.h"

enum {
    BUNDLE_HEADER = 32,     /* magic, version, count, generator version */
    BUNDLE_GENVER = 16,     /* bytes of the NUL-padded generator version */
    BUNDLE_ENTRY_FIXED = 52 /* bytes of an index entry besides its name: length, offset, size, SHA-256 */
};
/* A spec's canonical text is far shorter; the bound keeps a corrupt length from meaning anything. */
#define BUNDLE_NAME_MAX 4096u

_Static_assert(sizeof FG_VERSION_STRING + 10 <= BUNDLE_GENVER, "the generator version and 9 hex digits of the "
               "templates' hash must fit the 16-byte field");

static const uint8_t bundle_magic[8] = {'F', 'G', 'B', 'U', 'N', 'D', 'L', '\0'};


/* *sum = a + b unless that overflows size_t; returns 0 on overflow. */
static int add_size(size_t a, size_t b, size_t *sum) {
    if (a > SIZE_MAX - b)
        return 0;
    *sum = a + b;
    return 1;
}

/* Orders names as strcmp orders NUL-free strings (bytes compared unsigned, a prefix first), for names
 * given as (pointer, length) inside a buffer. */
static int name_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c != 0)
        return c;
    return (alen > blen) - (alen < blen);
}

static int entry_ptr_cmp(const void *a, const void *b) {
    const fg_bundle_entry *x = *(const fg_bundle_entry *const *)a;
    const fg_bundle_entry *y = *(const fg_bundle_entry *const *)b;
    return strcmp(x->name, y->name);
}

/* Checks that a name may go into a bundle: present, 1..4096 bytes. FG_ERR_INVALID_ARGUMENT otherwise,
 * naming the caller `who`. */
static fg_status check_name(const char *who, const char *name, fg_error *err) {
    if (!name)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s: an entry name is NULL.", who);
    size_t n = strlen(name);
    if (n == 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s: an entry name is empty.", who);
    if (n > BUNDLE_NAME_MAX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s: the entry name '%.60s...' is %zu bytes; the limit is %u.",
                       who, name, n, BUNDLE_NAME_MAX);
    return FG_OK;
}

/* Serializes a bundle into the canonical layout: entries sorted by name, payloads back to back after the
 * index in index order (see bundle.h). *out is malloc'd (caller frees). FG_ERR_INVALID_ARGUMENT for a bad
 * or duplicate name, a NULL payload with a size, or more than 2^32-1 entries; FG_ERR_NO_MEMORY. The
 * bundle itself need not be sorted. */
fg_status bundle_serialize(const fg_bundle *bundle, uint8_t **out, size_t *len, fg_error *err) {
    if (!out || !len)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_serialize: out and len must not be NULL.");
    *out = NULL;
    *len = 0;
    if (!bundle || (!bundle->entries && bundle->count > 0))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_serialize: the bundle is NULL or has no entry array.");
    if (bundle->count > UINT32_MAX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_serialize: %zu entries; a bundle holds at most %u.",
                       bundle->count, UINT32_MAX);
    size_t count = bundle->count;
    const fg_bundle_entry **sorted = fg_malloc((count ? count : 1) * sizeof *sorted);
    if (!sorted)
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory serializing a bundle of %zu entries.", count);
    fg_status st = FG_OK;
    size_t index_end = BUNDLE_HEADER, total;
    for (size_t i = 0; i < count && st == FG_OK; i++) {
        const fg_bundle_entry *e = &bundle->entries[i];
        sorted[i] = e;
        st = check_name("bundle_serialize", e->name, err);
        if (st == FG_OK && !e->data && e->size > 0)
            st = fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_serialize: entry '%s' has size %zu but no data.",
                         e->name, e->size);
        if (st == FG_OK && !add_size(index_end, BUNDLE_ENTRY_FIXED + strlen(e->name), &index_end))
            st = fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_serialize: the index is too large.");
    }
    total = index_end + 32;
    for (size_t i = 0; i < count && st == FG_OK; i++)
        if (!add_size(total, bundle->entries[i].size, &total))
            st = fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_serialize: the payloads are too large together.");
    if (st != FG_OK) {
        free(sorted);
        return st;
    }
    if (count > 1)
        qsort(sorted, count, sizeof *sorted, entry_ptr_cmp);
    for (size_t i = 1; i < count; i++)
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
            st = fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_serialize: the name '%s' appears twice.",
                         sorted[i]->name);
            free(sorted);
            return st;
        }

    uint8_t *buf = fg_malloc(total);
    if (!buf) {
        free(sorted);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory serializing a %zu-byte bundle.", total);
    }
    memcpy(buf, bundle_magic, sizeof bundle_magic);
    put_le32(buf + 8, FG_BUNDLE_FORMAT_VERSION);
    put_le32(buf + 12, (uint32_t)count);
    /* The generator's identity: version and templates' hash ("0.3.0+1a2b3c4d5"), NUL-padded. */
    char id[BUNDLE_GENVER];
    emit_templates_id(id, sizeof id);
    memset(buf + 16, 0, BUNDLE_GENVER);
    memcpy(buf + 16, id, strlen(id));
    size_t pos = BUNDLE_HEADER, offset = index_end + 32;
    for (size_t i = 0; i < count; i++) {
        const fg_bundle_entry *e = sorted[i];
        size_t n = strlen(e->name);
        put_le32(buf + pos, (uint32_t)n);
        memcpy(buf + pos + 4, e->name, n);
        pos += 4 + n;
        put_le64(buf + pos, (uint64_t)offset);
        put_le64(buf + pos + 8, (uint64_t)e->size);
        sha256(e->data, e->size, buf + pos + 16);
        pos += 48;
        if (e->size)
            memcpy(buf + offset, e->data, e->size);
        offset += e->size;
    }
    sha256(buf, index_end, buf + index_end);
    free(sorted);
    *out = buf;
    *len = total;
    return FG_OK;
}

/* Serializes and writes the bundle file atomically, mode 0644 (a bundle is meant to be shipped and read by
 * other users; the disk cache's files stay 0600). Errors as bundle_serialize,
 * plus FG_ERR_IO naming the path. */
fg_status bundle_write(const char *path, const fg_bundle *bundle, fg_error *err) {
    uint8_t *data;
    size_t len;
    fg_status st = bundle_serialize(bundle, &data, &len, err);
    if (st != FG_OK)
        return st;
    st = fg_write_file_atomic_mode(path, data, len, 0644, err);
    free(data);
    return st;
}

/* A growable text buffer for bundle_write_c; `failed` makes out-of-memory sticky, checked once at the end. */
typedef struct text_buf {
    char *p;     /* the text (not NUL-terminated) */
    size_t len;  /* bytes used */
    size_t cap;  /* bytes allocated */
    int failed;  /* 1 after an allocation failed; later appends do nothing */
} text_buf;

/* Appends n bytes, growing the buffer geometrically. */
static void text_add(text_buf *t, const char *s, size_t n) {
    if (t->failed)
        return;
    if (n > t->cap - t->len) {
        size_t need, cap = t->cap ? t->cap : 4096;
        if (!add_size(t->len, n, &need)) {
            t->failed = 1;
            return;
        }
        while (cap < need) {
            if (cap > SIZE_MAX / 2) {
                cap = need;
                break;
            }
            cap *= 2;
        }
        char *grown = fg_realloc(t->p, cap);
        if (!grown) {
            t->failed = 1;
            return;
        }
        t->p = grown;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
}

static void text_str(text_buf *t, const char *s) {
    text_add(t, s, strlen(s));
}

/* Appends a name inside a C block comment: non-printable bytes become '?', and a space is put between
 * '*' and '/' in either order so the name can neither end the comment nor open a nested one. */
static void text_comment_name(text_buf *t, const char *name) {
    char prev = ' ';
    for (const char *p = name; *p; p++) {
        char c = (*p >= 0x20 && *p <= 0x7e) ? *p : '?';
        if ((prev == '*' && c == '/') || (prev == '/' && c == '*'))
            text_add(t, " ", 1);
        text_add(t, &c, 1);
        prev = c;
    }
}

/* True when s is a C identifier a header could declare. */
static int is_identifier(const char *s) {
    if (!s || !s[0] || strlen(s) > 200)
        return 0;
    for (const char *p = s; *p; p++) {
        int alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_';
        int digit = *p >= '0' && *p <= '9';
        if (!alpha && !(digit && p != s))
            return 0;
    }
    return 1;
}

/* Writes the serialized bundle as a C source file (atomically): a header comment listing the entries,
 * then `const unsigned char SYMBOL[]` (16 hex bytes a line) and `const unsigned long SYMBOL_size`, both
 * with external C linkage also when compiled as C++. The text depends only on the bundle and the symbol.
 * Mode 0644, as bundle_write.
 * FG_ERR_INVALID_ARGUMENT when symbol is not a C identifier (or errors of bundle_serialize);
 * FG_ERR_NO_MEMORY; FG_ERR_IO naming the path. */
fg_status bundle_write_c(const char *path, const char *symbol, const fg_bundle *bundle, fg_error *err) {
    if (!is_identifier(symbol))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "bundle_write_c: the symbol '%s' is not a C identifier (letters, digits and '_', not "
                       "starting with a digit, at most 200 characters).",
                       symbol ? symbol : "(null)");
    uint8_t *data;
    size_t len;
    fg_status st = bundle_serialize(bundle, &data, &len, err);
    if (st != FG_OK)
        return st;

    /* The serializer sorted a private copy; list the names in that same order. */
    const fg_bundle_entry **order = fg_malloc((bundle->count ? bundle->count : 1) * sizeof *order);
    if (!order) {
        free(data);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory writing the bundle source '%s'.", path);
    }
    for (size_t i = 0; i < bundle->count; i++)
        order[i] = &bundle->entries[i];
    if (bundle->count > 1)
        qsort(order, bundle->count, sizeof *order, entry_ptr_cmp);

    text_buf t = {0};
    char line[512];
    snprintf(line, sizeof line,
             "/* A flashgen kernel bundle as C data (bundle format %u, flashgen %s), written by\n"
             " * `flashgen bundle --emit-c`. Load it with fg_bundle_load_memory(ctx, %s, %s_size).\n"
             " * %zu bytes, %zu entr%s:\n",
             FG_BUNDLE_FORMAT_VERSION, FG_VERSION_STRING, symbol, symbol, len, bundle->count,
             bundle->count == 1 ? "y" : "ies");
    text_str(&t, line);
    for (size_t i = 0; i < bundle->count; i++) {
        text_str(&t, " *   ");
        text_comment_name(&t, order[i]->name);
        snprintf(line, sizeof line, " (%zu bytes)\n", order[i]->size);
        text_str(&t, line);
    }
    free(order);
    snprintf(line, sizeof line,
             " */\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
             "extern const unsigned char %s[%zu];\nextern const unsigned long %s_size;\n"
             "const unsigned char %s[%zu] = {\n",
             symbol, len, symbol, symbol, len);
    text_str(&t, line);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i += 16) {
        char row[16 * 6 + 8];
        size_t n = 0;
        row[n++] = ' ';
        row[n++] = ' ';
        row[n++] = ' ';
        row[n++] = ' ';
        for (size_t j = i; j < len && j < i + 16; j++) {
            if (j > i)
                row[n++] = ' ';
            row[n++] = '0';
            row[n++] = 'x';
            row[n++] = hex[data[j] >> 4];
            row[n++] = hex[data[j] & 15];
            row[n++] = ',';
        }
        row[n++] = '\n';
        text_add(&t, row, n);
    }
    snprintf(line, sizeof line, "};\nconst unsigned long %s_size = %zuul;\n#ifdef __cplusplus\n}\n#endif\n", symbol,
             len);
    text_str(&t, line);
    free(data);
    if (t.failed) {
        free(t.p);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory writing the bundle source '%s'.", path);
    }
    st = fg_write_file_atomic_mode(path, t.p, t.len, 0644, err);
    free(t.p);
    return st;
}

/* Reads and checks a serialized bundle's structure (size, magic, format version, index bounds, index
 * checksum, the generator field's padding, names, payload layout; bundle.h lists them) and records, without
 * failing on them, whether the bundle names this flashgen as its generator and whether each payload matches
 * its checksum: `flashgen bundle ls` and `verify` report those per entry; bundle_parse refuses them. Item
 * names point into data, which must outlive *out. *out (free with bundle_index_free) is empty on failure.
 * FG_ERR_FORMAT with a sentence naming the rule; FG_ERR_NO_MEMORY; FG_ERR_INVALID_ARGUMENT. */
fg_status bundle_inspect(const uint8_t *data, size_t len, bundle_index *out, fg_error *err) {
    if (!out)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_inspect: out must not be NULL.");
    memset(out, 0, sizeof *out);
    if (!data && len > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_parse: data is NULL but len is %zu.", len);
    if (len < BUNDLE_HEADER + 32)
        return fg_fail(err, FG_ERR_FORMAT,
                       "the bundle is %zu bytes, shorter than the %d bytes of an empty bundle: it is truncated or "
                       "not a bundle.",
                       len, BUNDLE_HEADER + 32);
    if (memcmp(data, bundle_magic, sizeof bundle_magic) != 0)
        return fg_fail(err, FG_ERR_FORMAT, "the data is not a flashgen bundle: its magic is not \"FGBUNDL\".");
    uint32_t version = get_le32(data + 8);
    if (version != FG_BUNDLE_FORMAT_VERSION)
        return fg_fail(err, FG_ERR_FORMAT,
                       "the bundle has format version %u; this flashgen reads format version %u only.", version,
                       FG_BUNDLE_FORMAT_VERSION);
    uint32_t count = get_le32(data + 12);
    /* Each index entry takes at least BUNDLE_ENTRY_FIXED + 1 bytes: a bound before any allocation. */
    if (count > (len - BUNDLE_HEADER - 32) / (BUNDLE_ENTRY_FIXED + 1))
        return fg_fail(err, FG_ERR_FORMAT, "the bundle claims %u entries, more than its %zu bytes can index.", count,
                       len);

    bundle_item *idx = fg_calloc(count ? count : 1, sizeof *idx);
    if (!idx)
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory reading a bundle index of %u entries.", count);
    const uint8_t **sums = fg_malloc((count ? count : 1) * sizeof *sums);
    if (!sums) {
        free(idx);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory reading a bundle index of %u entries.", count);
    }
    fg_status st = FG_OK;
    size_t pos = BUNDLE_HEADER;
    size_t limit = len - 32; /* the index checksum must still fit after the index */
    uint64_t *offsets = NULL, *sizes = NULL;
    offsets = fg_malloc((count ? count : 1) * sizeof *offsets);
    sizes = fg_malloc((count ? count : 1) * sizeof *sizes);
    if (!offsets || !sizes)
        st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory reading a bundle index of %u entries.", count);
    for (uint32_t i = 0; i < count && st == FG_OK; i++) {
        size_t end;
        if (limit - pos < 4) {
            st = fg_fail(err, FG_ERR_FORMAT, "bundle index entry %u runs past the end of the bundle.", i);
            break;
        }
        uint32_t n = get_le32(data + pos);
        if (n == 0 || n > BUNDLE_NAME_MAX) {
            st = fg_fail(err, FG_ERR_FORMAT, "bundle index entry %u has a name of %u bytes; names are 1 to %u bytes.",
                         i, n, BUNDLE_NAME_MAX);
            break;
        }
        if (!add_size(pos, 4 + (size_t)n + 48, &end) || end > limit) {
            st = fg_fail(err, FG_ERR_FORMAT, "bundle index entry %u runs past the end of the bundle.", i);
            break;
        }
        idx[i].name = (const char *)(data + pos + 4);
        idx[i].name_len = n;
        offsets[i] = get_le64(data + pos + 4 + n);
        sizes[i] = get_le64(data + pos + 4 + n + 8);
        sums[i] = data + pos + 4 + n + 16;
        pos = end;
    }
    size_t index_end = pos;
    uint8_t sum[32];
    if (st == FG_OK) {
        sha256(data, index_end, sum);
        if (memcmp(sum, data + index_end, 32) != 0)
            st = fg_fail(err, FG_ERR_FORMAT, "the bundle's index checksum does not match: the file is corrupt.");
    }
    if (st == FG_OK) {
        const uint8_t *gv = data + 16;
        const uint8_t *nul = memchr(gv, '\0', BUNDLE_GENVER);
        size_t gvlen = nul ? (size_t)(nul - gv) : BUNDLE_GENVER;
        char id[BUNDLE_GENVER];
        emit_templates_id(id, sizeof id);
        memcpy(out->generator, gv, gvlen);
        out->generator[gvlen] = '\0';
        out->generator_ok = nul && gvlen == strlen(id) && memcmp(gv, id, gvlen) == 0;
        for (size_t k = gvlen; k < BUNDLE_GENVER && st == FG_OK; k++)
            if (gv[k] != 0)
                st = fg_fail(err, FG_ERR_FORMAT, "the bundle's generator version field is not NUL-padded.");
    }
    size_t expect = index_end + 32; /* the first payload starts right after the index checksum */
    for (uint32_t i = 0; i < count && st == FG_OK; i++) {
        const char *name = idx[i].name;
        const int shown = (int)(idx[i].name_len > 200 ? 200 : idx[i].name_len);
        if (memchr(name, '\0', idx[i].name_len)) {
            st = fg_fail(err, FG_ERR_FORMAT, "bundle index entry %u has a name containing a NUL byte.", i);
            break;
        }
        if (i > 0) {
            int c = name_cmp((const uint8_t *)idx[i - 1].name, idx[i - 1].name_len, (const uint8_t *)name,
                             idx[i].name_len);
            if (c >= 0) {
                st = fg_fail(err, FG_ERR_FORMAT, "bundle index entry %u ('%.*s') %s the entry before it.", i, shown,
                             name, c == 0 ? "repeats the name of" : "is not sorted after");
                break;
            }
        }
        if (offsets[i] != (uint64_t)expect) {
            st = fg_fail(err, FG_ERR_FORMAT,
                         "bundle index entry %u puts its payload at offset %llu; payloads must follow each other "
                         "from offset %zu.",
                         i, (unsigned long long)offsets[i], expect);
            break;
        }
        if (sizes[i] > (uint64_t)(len - expect)) {
            st = fg_fail(err, FG_ERR_FORMAT,
                         "bundle index entry %u has a %llu-byte payload at offset %zu, past the end of the "
                         "%zu-byte bundle.",
                         i, (unsigned long long)sizes[i], expect, len);
            break;
        }
        idx[i].offset = expect;
        idx[i].size = (size_t)sizes[i];
        sha256(data + expect, idx[i].size, sum);
        idx[i].sum_ok = memcmp(sum, sums[i], 32) == 0;
        expect += idx[i].size;
    }
    if (st == FG_OK && expect != len)
        st = fg_fail(err, FG_ERR_FORMAT, "the bundle has %zu bytes after its last payload.", len - expect);
    free(sums);
    free(offsets);
    free(sizes);
    if (st != FG_OK) {
        free(idx);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->items = idx;
    out->count = count;
    return FG_OK;
}

/* Frees what bundle_inspect gave and empties it. NULL is allowed. */
void bundle_index_free(bundle_index *index) {
    if (!index)
        return;
    free(index->items);
    memset(index, 0, sizeof *index);
}

/* Parses and verifies a serialized bundle (bundle_inspect's checks, then the generator version and every
 * payload's checksum) and copies the entries into *out, which the caller releases with bundle_free. The
 * bundle must come from this flashgen version: kernels from another version may expect a different
 * parameter layout. FG_ERR_FORMAT with a sentence naming the rule; FG_ERR_NO_MEMORY. *out is empty on
 * failure. */
fg_status bundle_parse(const uint8_t *data, size_t len, fg_bundle *out, fg_error *err) {
    if (!out)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_parse: out must not be NULL.");
    out->entries = NULL;
    out->count = 0;
    bundle_index ix;
    fg_status st = bundle_inspect(data, len, &ix, err);
    if (st != FG_OK)
        return st;
    if (!ix.generator_ok) {
        char id[BUNDLE_GENVER];
        emit_templates_id(id, sizeof id);
        st = fg_fail(err, FG_ERR_FORMAT,
                     "the bundle was made by flashgen '%s' (version+templates hash), this is %s; its kernels "
                     "may not match this build's parameters or launch: rebuild the bundle.",
                     ix.generator, id);
    }
    for (size_t i = 0; i < ix.count && st == FG_OK; i++)
        if (!ix.items[i].sum_ok)
            st = fg_fail(err, FG_ERR_FORMAT, "the payload of bundle entry '%.*s' does not match its checksum.",
                         (int)(ix.items[i].name_len > 200 ? 200 : ix.items[i].name_len), ix.items[i].name);
    if (st != FG_OK) {
        bundle_index_free(&ix);
        return st;
    }
    size_t count = ix.count;
    fg_bundle_entry *entries = fg_calloc(count ? count : 1, sizeof *entries);
    if (!entries) {
        bundle_index_free(&ix);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory copying a bundle of %zu entries.", count);
    }
    for (size_t i = 0; i < count; i++) {
        const bundle_item *it = &ix.items[i];
        entries[i].name = fg_malloc(it->name_len + 1);
        entries[i].data = fg_malloc(it->size ? it->size : 1);
        if (!entries[i].name || !entries[i].data) {
            fg_bundle partial = {entries, i + 1};
            bundle_free(&partial);
            bundle_index_free(&ix);
            return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory copying bundle entry %zu.", i);
        }
        memcpy(entries[i].name, it->name, it->name_len);
        entries[i].name[it->name_len] = '\0';
        if (it->size)
            memcpy(entries[i].data, data + it->offset, it->size);
        entries[i].size = it->size;
    }
    bundle_index_free(&ix);
    out->entries = entries;
    out->count = count;
    return FG_OK;
}

/* Reads and parses a bundle file; errors name the path. *out is empty on failure. */
fg_status bundle_read(const char *path, fg_bundle *out, fg_error *err) {
    if (!out)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_read: out must not be NULL.");
    out->entries = NULL;
    out->count = 0;
    uint8_t *data;
    size_t len;
    fg_status st = fg_read_file_max(path, FG_BUNDLE_MAX_BYTES, &data, &len, err);
    if (st != FG_OK)
        return st;
    fg_error local;
    fg_error_clear(&local);
    st = bundle_parse(data, len, out, &local);
    free(data);
    if (st != FG_OK)
        return fg_fail(err, st, "bundle '%.300s': %.700s", path, local.msg);
    return FG_OK;
}

/* Finds an entry by exact name with a binary search; relies on the entries being sorted, which
 * bundle_add and bundle_parse guarantee. NULL when absent or when either argument is NULL. */
const fg_bundle_entry *bundle_find(const fg_bundle *bundle, const char *name) {
    if (!bundle || !name || !bundle->entries)
        return NULL;
    size_t lo = 0, hi = bundle->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(bundle->entries[mid].name, name);
        if (c == 0)
            return &bundle->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Inserts a copy of (name, data) keeping the entries sorted. An empty bundle is {NULL, 0}.
 * FG_ERR_INVALID_ARGUMENT for a duplicate, empty or over-long name or NULL data with a size;
 * FG_ERR_NO_MEMORY. The bundle is unchanged on failure. */
fg_status bundle_add(fg_bundle *bundle, const char *name, const uint8_t *data, size_t size, fg_error *err) {
    if (!bundle || (!bundle->entries && bundle->count > 0))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_add: the bundle is NULL or has no entry array.");
    fg_status st = check_name("bundle_add", name, err);
    if (st != FG_OK)
        return st;
    if (!data && size > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_add: entry '%s' has size %zu but no data.", name, size);
    if (bundle->count >= UINT32_MAX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_add: the bundle already holds %zu entries.",
                       bundle->count);
    size_t lo = 0, hi = bundle->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(bundle->entries[mid].name, name);
        if (c == 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "bundle_add: the bundle already has an entry named '%s'.",
                           name);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    char *name_copy = fg_strdup(name);
    uint8_t *data_copy = fg_malloc(size ? size : 1);
    fg_bundle_entry *grown = NULL;
    if (name_copy && data_copy)
        grown = fg_realloc(bundle->entries, (bundle->count + 1) * sizeof *grown);
    if (!grown) {
        free(name_copy);
        free(data_copy);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory adding bundle entry '%s' (%zu bytes).", name, size);
    }
    if (size)
        memcpy(data_copy, data, size);
    memmove(grown + lo + 1, grown + lo, (bundle->count - lo) * sizeof *grown);
    grown[lo].name = name_copy;
    grown[lo].data = data_copy;
    grown[lo].size = size;
    bundle->entries = grown;
    bundle->count++;
    return FG_OK;
}

/* Frees every entry and the entry array, leaving an empty bundle. NULL is allowed. */
void bundle_free(fg_bundle *bundle) {
    if (!bundle)
        return;
    for (size_t i = 0; i < bundle->count; i++) {
        free(bundle->entries[i].name);
        free(bundle->entries[i].data);
    }
    free(bundle->entries);
    bundle->entries = NULL;
    bundle->count = 0;
}
