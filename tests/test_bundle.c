/* test_bundle.c: the kernel bundle format (runtime/bundle.c).
 *
 * Round trips with random entries, lookup, duplicate refusal, and the reader's defenses: every truncation,
 * every bit of the index flipped, corrupted payloads, wrong magic/version/generator version, and
 * hand-built bundles that carry valid checksums but break one layout rule each (the checksums alone would
 * not catch those). bundle_write_c's output is compiled with the system C compiler and its bytes are read
 * back through a small program. Scratch files live in a mkdtemp directory under /tmp. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "runtime/bundle.h"
#include "runtime/cache.h"
#include "generator/emit.h"
#include "core/sha256.h"
#include "tests/test_util.h"

static char g_root[64]; /* this test's scratch directory */

static void scratch_init(void) {
    test_scratch_make(g_root, sizeof g_root, "fg-test-bundle");
}

static void scratch_fini(void) { test_scratch_remove(g_root, "fg-test-bundle"); }

TestSuite(bundle, .init = scratch_init, .fini = scratch_fini);

/* Builds a bundle of `n` entries with spec-like names, added in a scrambled order, payload sizes from 0
 * up to a few kilobytes. */
static void make_sample(fg_bundle *b, int n) {
    b->entries = NULL;
    b->count = 0;
    for (int k = 0; k < n; k++) {
        int i = (k * 7 + 3) % n; /* 7 is coprime with the n used here: a permutation */
        char name[128];
        snprintf(name, sizeof name, "arch=sm_%d causal=%d dtype=bf16 head_dim=%d", 80 + i % 3 * 5, i % 2, 32 * (i + 1));
        size_t size = i == 0 ? 0 : (size_t)(i * 997) % 5000 + 1;
        uint8_t *data = malloc(size ? size : 1);
        cr_assert_not_null(data);
        fill_random(data, size, (uint64_t)i);
        fg_error err;
        fg_error_clear(&err);
        cr_assert_eq(bundle_add(b, name, data, size, &err), FG_OK, "%s", err.msg);
        free(data);
    }
}

static void serialize_ok(const fg_bundle *b, uint8_t **out, size_t *len) {
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(bundle_serialize(b, out, len, &err), FG_OK, "%s", err.msg);
}

/* Expects parse to refuse the bytes with FG_ERR_FORMAT, a sentence (containing `word` when given) and an
 * empty result. */
static void expect_refused(const uint8_t *data, size_t len, const char *word, const char *what, size_t at) {
    fg_bundle out = {(fg_bundle_entry *)1, 99};
    fg_error err;
    fg_error_clear(&err);
    fg_status st = bundle_parse(data, len, &out, &err);
    cr_assert_eq(st, FG_ERR_FORMAT, "%s at %zu was accepted (status %d)", what, at, (int)st);
    cr_assert_null(out.entries, "%s at %zu: a refused bundle must leave the output empty", what, at);
    cr_assert_eq(out.count, 0);
    cr_assert(strlen(err.msg) > 10, "%s at %zu: no sentence", what, at);
    if (word)
        cr_assert_not_null(strstr(err.msg, word), "%s: the sentence should mention '%s': %s", what, word, err.msg);
}

/* The end of the index (where its checksum starts) in a well-formed bundle. */
static size_t index_end_of(const uint8_t *data) {
    uint32_t count = data[12] | data[13] << 8 | data[14] << 16 | (uint32_t)data[15] << 24;
    size_t pos = 32;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t n = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16 | (uint32_t)data[pos + 3] << 24;
        pos += 4 + n + 48;
    }
    return pos;
}

/* ---------------------------------------------------------------- round trips */

Test(bundle, round_trip_and_find) {
    fg_bundle b;
    make_sample(&b, 9);
    cr_assert_eq(b.count, 9);
    for (size_t i = 1; i < b.count; i++)
        cr_assert_lt(strcmp(b.entries[i - 1].name, b.entries[i].name), 0, "bundle_add keeps entries sorted");
    uint8_t *bytes;
    size_t len;
    serialize_ok(&b, &bytes, &len);
    fg_bundle back;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(bundle_parse(bytes, len, &back, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(back.count, b.count);
    for (size_t i = 0; i < b.count; i++) {
        const fg_bundle_entry *e = bundle_find(&back, b.entries[i].name);
        cr_assert_not_null(e, "'%s' not found after a round trip", b.entries[i].name);
        cr_assert_str_eq(e->name, b.entries[i].name);
        cr_assert_eq(e->size, b.entries[i].size);
        cr_assert_not_null(e->data);
        cr_assert(e->size == 0 || memcmp(e->data, b.entries[i].data, e->size) == 0);
        cr_assert_eq(back.entries[i].size, b.entries[i].size, "parsed entries are in name order");
    }
    cr_assert_null(bundle_find(&back, "arch=sm_80"), "a prefix of a name is not a match");
    cr_assert_null(bundle_find(&back, "zzz"));
    cr_assert_null(bundle_find(&back, ""));
    cr_assert_null(bundle_find(NULL, "x"));

    /* Serializing is deterministic, and independent of the order of the entry array. */
    uint8_t *again;
    size_t len2;
    serialize_ok(&back, &again, &len2);
    cr_assert_eq(len2, len);
    cr_assert_eq(memcmp(again, bytes, len), 0);
    free(again);
    fg_bundle_entry tmp = b.entries[0];
    b.entries[0] = b.entries[b.count - 1];
    b.entries[b.count - 1] = tmp;
    serialize_ok(&b, &again, &len2);
    cr_assert_eq(len2, len);
    cr_assert_eq(memcmp(again, bytes, len), 0, "serialize must sort the entries itself");
    free(again);
    free(bytes);
    bundle_free(&back);
    bundle_free(&b);
    cr_assert_null(b.entries);
    cr_assert_eq(b.count, 0);
    bundle_free(&b); /* twice is harmless */
}

Test(bundle, empty_bundle_round_trips) {
    fg_bundle b = {NULL, 0}, back;
    uint8_t *bytes;
    size_t len;
    serialize_ok(&b, &bytes, &len);
    cr_assert_eq(len, 64, "header and index checksum only");
    cr_assert_eq(bundle_parse(bytes, len, &back, NULL), FG_OK);
    cr_assert_eq(back.count, 0);
    cr_assert_null(bundle_find(&back, "x"));
    bundle_free(&back);
    free(bytes);
}

Test(bundle, file_round_trip) {
    fg_bundle b, back;
    make_sample(&b, 5);
    char path[128];
    snprintf(path, sizeof path, "%s/kernels.fgb", g_root);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(bundle_write(path, &b, &err), FG_OK, "%s", err.msg);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    /* Bundles are meant to be shipped: readable by every user, unlike the disk cache's 0600 files. */
    cr_assert_eq(st.st_mode & 0777, 0644, "mode %o", (unsigned)(st.st_mode & 0777));
    cr_assert_eq(bundle_read(path, &back, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(back.count, 5);
    for (size_t i = 0; i < 5; i++) {
        cr_assert_str_eq(back.entries[i].name, b.entries[i].name);
        cr_assert_eq(back.entries[i].size, b.entries[i].size);
        cr_assert(b.entries[i].size == 0 || memcmp(back.entries[i].data, b.entries[i].data, b.entries[i].size) == 0);
    }
    bundle_free(&back);

    /* Errors from a file name the file. */
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fputc('X', f), 'X');
    cr_assert_eq(fclose(f), 0);
    fg_error_clear(&err);
    cr_assert_eq(bundle_read(path, &back, &err), FG_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, path), "%s", err.msg);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing.fgb", g_root);
    fg_error_clear(&err);
    cr_assert_eq(bundle_read(missing, &back, &err), FG_ERR_IO);
    cr_assert_not_null(strstr(err.msg, missing), "%s", err.msg);
    bundle_free(&b);
}

/* Issue 37 item 6: a FIFO named as a bundle is refused at once (it blocked fg_bundle_load forever), and a file
 * larger than FG_BUNDLE_MAX_BYTES is refused before a byte of it is read (a sparse file: no disk used). */
Test(bundle, reader_refuses_fifos_and_oversized_files) {
    char fifo[128], big[128];
    snprintf(fifo, sizeof fifo, "%s/pipe.fgb", g_root);
    snprintf(big, sizeof big, "%s/big.fgb", g_root);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    fg_bundle back;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(bundle_read(fifo, &back, &err), FG_ERR_IO);
    cr_assert(strstr(err.msg, "FIFO") && strstr(err.msg, fifo), "%s", err.msg);
    int fd = open(big, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)FG_BUNDLE_MAX_BYTES + 1), 0);
    close(fd);
    fg_error_clear(&err);
    cr_assert_eq(bundle_read(big, &back, &err), FG_ERR_IO);
    cr_assert(strstr(err.msg, "more than the 1073741824"), "%s", err.msg);
}

/* ---------------------------------------------------------------- bad input through the API */

Test(bundle, duplicate_and_bad_names_are_refused) {
    fg_bundle b;
    make_sample(&b, 3);
    char dup[128];
    strcpy(dup, b.entries[1].name);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(bundle_add(&b, dup, (const uint8_t *)"x", 1, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, dup), "%s", err.msg);
    cr_assert_eq(b.count, 3, "a refused add changes nothing");
    cr_assert_eq(bundle_add(&b, "", (const uint8_t *)"x", 1, NULL), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(bundle_add(&b, NULL, (const uint8_t *)"x", 1, NULL), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(bundle_add(&b, "no data", NULL, 5, NULL), FG_ERR_INVALID_ARGUMENT);
    char *huge = malloc(4098);
    cr_assert_not_null(huge);
    memset(huge, 'n', 4097);
    huge[4097] = '\0';
    cr_assert_eq(bundle_add(&b, huge, (const uint8_t *)"x", 1, NULL), FG_ERR_INVALID_ARGUMENT);
    huge[4096] = '\0';
    cr_assert_eq(bundle_add(&b, huge, (const uint8_t *)"x", 1, NULL), FG_OK, "4096 bytes is allowed");
    free(huge);
    cr_assert_eq(b.count, 4);

    /* An entry array built by hand with a repeated name cannot be serialized. */
    fg_bundle_entry twice[2] = {{dup, (uint8_t *)"a", 1}, {dup, (uint8_t *)"b", 1}};
    fg_bundle hand = {twice, 2};
    uint8_t *bytes = (uint8_t *)"untouched";
    size_t len;
    fg_error_clear(&err);
    cr_assert_eq(bundle_serialize(&hand, &bytes, &len, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert_null(bytes);
    cr_assert_not_null(strstr(err.msg, "twice"), "%s", err.msg);
    bundle_free(&b);
}

/* ---------------------------------------------------------------- damaged bytes */

Test(bundle, truncation_at_every_length_is_refused) {
    fg_bundle b;
    make_sample(&b, 4);
    uint8_t *bytes;
    size_t len;
    serialize_ok(&b, &bytes, &len);
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n ? n : 1); /* an exact-size copy, so a read past the end is caught by ASan */
        cr_assert_not_null(cut);
        memcpy(cut, bytes, n);
        expect_refused(cut, n, NULL, "truncation", n);
        free(cut);
    }
    expect_refused(NULL, 0, NULL, "no data", 0);
    free(bytes);
    bundle_free(&b);
}

Test(bundle, every_bit_flip_in_the_index_is_refused) {
    fg_bundle b;
    make_sample(&b, 4);
    uint8_t *bytes;
    size_t len;
    serialize_ok(&b, &bytes, &len);
    size_t end = index_end_of(bytes) + 32; /* the index and its checksum */
    for (size_t off = 0; off < end; off++)
        for (int bit = 0; bit < 8; bit++) {
            bytes[off] ^= (uint8_t)(1u << bit);
            expect_refused(bytes, len, NULL, "bit flip in the index at byte", off);
            bytes[off] ^= (uint8_t)(1u << bit);
        }
    fg_bundle back;
    cr_assert_eq(bundle_parse(bytes, len, &back, NULL), FG_OK, "the restored bytes parse again");
    bundle_free(&back);
    free(bytes);
    bundle_free(&b);
}

Test(bundle, corrupted_payload_is_refused) {
    fg_bundle b;
    make_sample(&b, 4);
    uint8_t *bytes;
    size_t len;
    serialize_ok(&b, &bytes, &len);
    size_t start = index_end_of(bytes) + 32;
    cr_assert_gt(len, start);
    for (size_t off = start; off < len; off++) {
        bytes[off] ^= (uint8_t)(1u << (off % 8));
        expect_refused(bytes, len, "checksum", "payload bit flip at byte", off);
        bytes[off] ^= (uint8_t)(1u << (off % 8));
    }
    free(bytes);
    bundle_free(&b);
}

Test(bundle, bad_magic_and_versions_say_so) {
    fg_bundle b;
    make_sample(&b, 2);
    uint8_t *bytes;
    size_t len;
    serialize_ok(&b, &bytes, &len);
    bytes[0] = 'X';
    expect_refused(bytes, len, "magic", "bad magic", 0);
    bytes[0] = 'F';
    bytes[8] = 2;
    expect_refused(bytes, len, "format version 2", "format version 2", 8);
    bytes[8] = 1;
    /* Another generator version, with the index checksum made consistent again. */
    memset(bytes + 16, 0, 16);
    memcpy(bytes + 16, "9.9.9", 5);
    size_t end = index_end_of(bytes);
    sha256(bytes, end, bytes + end);
    expect_refused(bytes, len, "9.9.9", "another generator version", 16);
    expect_refused(bytes, len, "rebuild", "another generator version", 16);
    /* This version with other templates: a bundle from another commit of the same version, whose kernels
     * may expect another launch (the sm_90a family's grid changed within 0.3.0). */
    char id[16];
    emit_templates_id(id, sizeof id);
    cr_assert_eq(strncmp(id, FG_VERSION_STRING "+", strlen(FG_VERSION_STRING) + 1), 0, "%s", id);
    cr_assert_eq(strlen(id), 15u, "version, '+' and 9 hex digits: %s", id);
    memset(bytes + 16, 0, 16);
    memcpy(bytes + 16, id, strlen(id));
    bytes[16 + strlen(id) - 1] = bytes[16 + strlen(id) - 1] == '0' ? '1' : '0';
    sha256(bytes, end, bytes + end);
    expect_refused(bytes, len, FG_VERSION_STRING "+", "the same version with other templates", 16);
    free(bytes);
    bundle_free(&b);
}

/* ---------------------------------------------------------------- hand-built bundles, one broken rule each */

typedef struct raw_entry {
    const char *name;     /* name bytes (may hold a NUL) */
    size_t name_len;      /* their count */
    const char *data;     /* payload bytes */
    size_t size;          /* their count */
    long long offset_fix; /* added to the canonical offset */
} raw_entry;

/* Builds a bundle byte by byte as the format describes, with valid checksums, so that each test can break
 * exactly one layout rule. count_fix is added to the entry count; extra zero bytes go at the end. */
static uint8_t *build_raw(const raw_entry *e, uint32_t n, int count_fix, size_t extra, size_t *len) {
    size_t index_end = 32, total;
    for (uint32_t i = 0; i < n; i++)
        index_end += 4 + e[i].name_len + 48;
    total = index_end + 32 + extra;
    for (uint32_t i = 0; i < n; i++)
        total += e[i].size;
    uint8_t *b = calloc(1, total);
    cr_assert_not_null(b);
    memcpy(b, "FGBUNDL", 8);
    b[8] = 1;
    uint32_t count = n + (uint32_t)count_fix;
    for (int k = 0; k < 4; k++)
        b[12 + k] = (uint8_t)(count >> (8 * k));
    char id[16];
    emit_templates_id(id, sizeof id);
    memcpy(b + 16, id, strlen(id));
    size_t pos = 32, offset = index_end + 32;
    for (uint32_t i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++)
            b[pos + k] = (uint8_t)(e[i].name_len >> (8 * k));
        memcpy(b + pos + 4, e[i].name, e[i].name_len);
        pos += 4 + e[i].name_len;
        uint64_t off = (uint64_t)((long long)offset + e[i].offset_fix), size = e[i].size;
        for (int k = 0; k < 8; k++) {
            b[pos + k] = (uint8_t)(off >> (8 * k));
            b[pos + 8 + k] = (uint8_t)(size >> (8 * k));
        }
        sha256(e[i].data, e[i].size, b + pos + 16);
        pos += 48;
        memcpy(b + offset, e[i].data, e[i].size);
        offset += e[i].size;
    }
    sha256(b, index_end, b + index_end);
    *len = total;
    return b;
}

#define E(name, data, fix) {name, sizeof(name) - 1, data, sizeof(data) - 1, fix}

Test(bundle, hand_built_layout_violations_are_refused) {
    size_t len;
    uint8_t *b;
    fg_bundle out;

    /* The builder itself makes acceptable bundles, so each refusal below is due to its one broken rule. */
    raw_entry good[] = {E("alpha", "AAAA", 0), E("beta", "BB", 0), E("gamma", "", 0)};
    b = build_raw(good, 3, 0, 0, &len);
    cr_assert_eq(bundle_parse(b, len, &out, NULL), FG_OK, "the hand-built reference bundle must parse");
    cr_assert_eq(out.count, 3);
    cr_assert_eq(memcmp(bundle_find(&out, "beta")->data, "BB", 2), 0);
    bundle_free(&out);
    free(b);

    raw_entry unsorted[] = {E("beta", "B", 0), E("alpha", "A", 0)};
    b = build_raw(unsorted, 2, 0, 0, &len);
    expect_refused(b, len, "sorted", "unsorted names", 0);
    free(b);

    raw_entry dup[] = {E("alpha", "A", 0), E("alpha", "B", 0)};
    b = build_raw(dup, 2, 0, 0, &len);
    expect_refused(b, len, "repeats", "a duplicate name", 0);
    free(b);

    raw_entry nul[] = {E("al\0pha", "A", 0)};
    b = build_raw(nul, 1, 0, 0, &len);
    expect_refused(b, len, "NUL", "a name with a NUL byte", 0);
    free(b);

    raw_entry empty[] = {E("", "A", 0)};
    b = build_raw(empty, 1, 0, 0, &len);
    expect_refused(b, len, "name", "an empty name", 0);
    free(b);

    char *longname = malloc(4097);
    cr_assert_not_null(longname);
    memset(longname, 'n', 4097);
    raw_entry toolong[] = {{longname, 4097, "A", 1, 0}};
    b = build_raw(toolong, 1, 0, 0, &len);
    expect_refused(b, len, "4097", "a 4097-byte name", 0);
    free(b);
    free(longname);

    raw_entry gap[] = {E("alpha", "AAAA", 0), E("beta", "BB", 1)};
    b = build_raw(gap, 2, 0, 1, &len);
    expect_refused(b, len, "offset", "a gap between payloads", 0);
    free(b);

    raw_entry overlap[] = {E("alpha", "AAAA", 0), E("beta", "AA", -4)};
    b = build_raw(overlap, 2, 0, 0, &len);
    expect_refused(b, len, "offset", "overlapping payloads", 0);
    free(b);

    raw_entry huge_off[] = {{"alpha", 5, "A", 1, (long long)1 << 62}};
    b = build_raw(huge_off, 1, 0, 0, &len);
    expect_refused(b, len, "offset", "an offset far past the end", 0);
    free(b);

    b = build_raw(good, 3, 0, 1, &len);
    expect_refused(b, len, "after its last payload", "a trailing byte", 0);
    free(b);

    b = build_raw(good, 3, 1000000, 0, &len);
    expect_refused(b, len, "entries", "an entry count far too large", 0);
    free(b);

    b = build_raw(good, 3, 1, 0, &len);
    expect_refused(b, len, NULL, "one entry more than the index holds", 0);
    free(b);

    /* A size that would wrap around when added to the offset. */
    b = build_raw(good, 1, 0, 0, &len);
    size_t size_at = 32 + 4 + 5 + 8;
    memset(b + size_at, 0xff, 8);
    sha256(b, index_end_of(b), b + index_end_of(b));
    expect_refused(b, len, "past the end", "a size of 2^64-1", 0);
    free(b);
}

/* ---------------------------------------------------------------- C source output */

static int run(const char *cmd) {
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

Test(bundle, write_c_compiles_and_holds_the_bytes) {
    if (run("command -v cc >/dev/null 2>&1") != 0)
        cr_skip("no C compiler (cc) on this machine, so the generated source cannot be compiled");
    fg_bundle b;
    make_sample(&b, 5);
    /* A name that tries to end the comment must not break the file. */
    cr_assert_eq(bundle_add(&b, "evil */ int x = ; /*", (const uint8_t *)"E", 1, NULL), FG_OK);
    char src[128], obj[128], main_c[160], exe[128], dump[128], cmd[1024];
    snprintf(src, sizeof src, "%s/kernels.c", g_root);
    snprintf(obj, sizeof obj, "%s/kernels.o", g_root);
    snprintf(main_c, sizeof main_c, "%s/main.c", g_root);
    snprintf(exe, sizeof exe, "%s/dump", g_root);
    snprintf(dump, sizeof dump, "%s/dump.bin", g_root);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(bundle_write_c(src, "fg_test_kernels", &b, &err), FG_OK, "%s", err.msg);

    uint8_t *text;
    size_t tlen;
    cr_assert_eq(fg_read_file(src, &text, &tlen, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(strncmp((char *)text, "/*", 2), 0, "the file starts with its header comment");
    for (size_t i = 0; i < b.count; i++)
        if (!strstr(b.entries[i].name, "evil"))
            cr_assert_not_null(strstr((char *)text, b.entries[i].name), "the header lists '%s'", b.entries[i].name);
    cr_assert_not_null(strstr((char *)text, "0x46, 0x47, 0x42, 0x55, 0x4e, 0x44, 0x4c, 0x00, "),
                       "16 hex bytes a line, starting with the magic");
    free(text);

    snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Werror -c '%s' -o '%s'", src, obj);
    cr_assert_eq(run(cmd), 0, "the generated source does not compile: %s", cmd);

    FILE *f = fopen(main_c, "w");
    cr_assert_not_null(f);
    fprintf(f, "#include <stdio.h>\n"
               "extern const unsigned char fg_test_kernels[];\n"
               "extern const unsigned long fg_test_kernels_size;\n"
               "int main(int argc, char **argv) {\n"
               "    FILE *f = argc > 1 ? fopen(argv[1], \"wb\") : NULL;\n"
               "    if (!f) return 2;\n"
               "    if (fwrite(fg_test_kernels, 1, fg_test_kernels_size, f) != fg_test_kernels_size) return 3;\n"
               "    return fclose(f) != 0;\n"
               "}\n");
    cr_assert_eq(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "cc -std=c11 '%s' '%s' -o '%s' && '%s' '%s'", main_c, obj, exe, exe, dump);
    cr_assert_eq(run(cmd), 0, "linking or running the reader failed: %s", cmd);

    uint8_t *bytes, *expect;
    size_t len, elen;
    cr_assert_eq(fg_read_file(dump, &bytes, &len, &err), FG_OK, "%s", err.msg);
    serialize_ok(&b, &expect, &elen);
    cr_assert_eq(len, elen);
    cr_assert_eq(memcmp(bytes, expect, len), 0, "the compiled array differs from the serialized bundle");
    fg_bundle back;
    cr_assert_eq(bundle_parse(bytes, len, &back, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(back.count, b.count);
    bundle_free(&back);
    free(bytes);
    free(expect);

    /* The same file is valid C++ with C linkage, for engines written in C++. */
    if (run("command -v c++ >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd, "c++ -x c++ -Wall -Werror -c '%s' -o '%s' && nm '%s' | grep -q ' R fg_test_kernels$'",
                 src, obj, obj);
        cr_assert_eq(run(cmd), 0, "the generated source does not compile as C++ with C linkage: %s", cmd);
    }

    fg_error_clear(&err);
    cr_assert_eq(bundle_write_c(src, "1bad-name", &b, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, "1bad-name"), "%s", err.msg);
    bundle_free(&b);
}
