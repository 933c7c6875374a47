/* fuzz_bundle.c: libFuzzer target for the bundle reader (runtime/bundle.c), built by tests/fuzz/run.sh.
 *
 * A bundle is machine code from outside the process, so bundle_parse must survive any bytes. Each input
 * is tried twice: as given, and with its checksums recomputed wherever the index can be walked (random
 * bytes almost never carry a matching SHA-256, so without the second try the fuzzer would only ever
 * exercise the checks before the index checksum). For each try:
 *   - a failure is FG_ERR_FORMAT with a sentence and leaves the bundle empty;
 *   - a success gives sorted, unique, NUL-free names that bundle_find finds, and bundle_serialize of the
 *     result gives back exactly the input bytes (the layout is canonical: a reader that accepted two
 *     encodings of one bundle would let the same kernels hash differently), which parse to equal entries.
 * The input also checks sha256: hashing it in pieces must equal hashing it at once.
 *
 * Built with -DFG_FUZZ_SEED_MAIN instead, this file is the seed generator: `fuzz_bundle_seeds DIR`
 * writes a few small valid bundles into DIR (run.sh does this before fuzzing). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/bundle.h"
#include "core/little_endian.h"
#include "core/sha256.h"

#ifndef FG_FUZZ_SEED_MAIN
/* Reports a broken rule and stops the fuzzer (a finding). */
static void fuzz_bundle_fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_bundle: %s\n  detail: %s\n", what, detail);
    abort();
}

/* Parses data and checks every rule listed in the file comment for the outcome. */
static void fuzz_bundle_check(const uint8_t *data, size_t len) {
    fg_bundle b;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = bundle_parse(data, len, &b, &err);
    if (st != FG_OK) {
        if (st != FG_ERR_FORMAT || err.msg[0] == '\0')
            fuzz_bundle_fail("a refused bundle is not FG_ERR_FORMAT with a sentence", err.msg);
        if (b.entries != NULL || b.count != 0)
            fuzz_bundle_fail("a refused bundle left entries behind", err.msg);
        return;
    }
    for (size_t i = 0; i < b.count; i++) {
        const fg_bundle_entry *e = &b.entries[i];
        size_t n = strlen(e->name);
        if (n == 0 || n > 4096)
            fuzz_bundle_fail("a parsed entry name is empty or over 4096 bytes", e->name);
        if (i > 0 && strcmp(b.entries[i - 1].name, e->name) >= 0)
            fuzz_bundle_fail("parsed entries are not sorted and unique", e->name);
        if (bundle_find(&b, e->name) != e)
            fuzz_bundle_fail("bundle_find does not find a parsed entry", e->name);
    }
    uint8_t *out = NULL;
    size_t out_len = 0;
    fg_error_clear(&err);
    if (bundle_serialize(&b, &out, &out_len, &err) != FG_OK)
        fuzz_bundle_fail("a parsed bundle does not serialize", err.msg);
    if (out_len != len || memcmp(out, data, len) != 0)
        fuzz_bundle_fail("serializing a parsed bundle does not give back its bytes", "");
    fg_bundle again;
    fg_error_clear(&err);
    if (bundle_parse(out, out_len, &again, &err) != FG_OK)
        fuzz_bundle_fail("a serialized bundle does not parse", err.msg);
    if (again.count != b.count)
        fuzz_bundle_fail("a reparsed bundle has another entry count", "");
    for (size_t i = 0; i < b.count; i++) {
        const fg_bundle_entry *x = &b.entries[i], *y = &again.entries[i];
        if (strcmp(x->name, y->name) != 0 || x->size != y->size || (x->size && memcmp(x->data, y->data, x->size)))
            fuzz_bundle_fail("a reparsed entry differs", x->name);
    }
    bundle_free(&again);
    bundle_free(&b);
    free(out);
}

/* Recomputes, in place, every checksum that the index as written lets us locate: each payload's whose
 * offset and size lie inside the buffer, then the index checksum after the last entry that fits. Leaves
 * everything else (magic, version, lengths, order) as the fuzzer made it. */
static void fuzz_bundle_fix_sums(uint8_t *d, size_t len) {
    if (len < 64)
        return;
    uint32_t count = get_le32(d + 12);
    size_t pos = 32, limit = len - 32;
    for (uint32_t i = 0; i < count; i++) {
        if (limit - pos < 4)
            break;
        uint32_t n = get_le32(d + pos);
        if (n > 4096 || limit - pos - 4 < (size_t)n + 48)
            break;
        uint64_t off = get_le64(d + pos + 4 + n), size = get_le64(d + pos + 4 + n + 8);
        if (off <= len && size <= len - off)
            sha256(d + off, (size_t)size, d + pos + 4 + n + 16);
        pos += 4 + (size_t)n + 48;
    }
    sha256(d, pos, d + pos);
}

/* sha256 over the input in pieces (sizes taken from the input's first bytes) must equal the one-shot. */
static void fuzz_bundle_check_sha(const uint8_t *data, size_t len) {
    uint8_t once[32], pieces[32];
    sha256(data, len, once);
    fg_sha256 s;
    sha256_init(&s);
    size_t pos = 0;
    for (size_t k = 0; pos < len; k++) {
        size_t step = (k < len ? data[k] : 1) % 131;
        if (step > len - pos)
            step = len - pos;
        sha256_update(&s, data + pos, step);
        pos += step;
    }
    sha256_final(&s, pieces);
    if (memcmp(once, pieces, 32) != 0)
        fuzz_bundle_fail("sha256 in pieces differs from sha256 at once", "");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bundle_check(data, size);
    fuzz_bundle_check_sha(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    if (fixed == NULL)
        return 0;
    if (size)
        memcpy(fixed, data, size);
    fuzz_bundle_fix_sums(fixed, size);
    fuzz_bundle_check(fixed, size);
    free(fixed);
    return 0;
}
#else
/* Writes one seed bundle holding the first n of the sample entries to DIR/NAME; 0 on success. */
static int fuzz_bundle_seed(const char *dir, const char *name, size_t n) {
    static const char *const names[] = {
        "arch=sm_80,block_m=128,block_n=64,causal=0,dtype=fp16,head_dim=64,kind=fwd,stages=3,warps=4",
        "arch=sm_90,block_m=128,block_n=32,causal=1,dtype=bf16,head_dim=128,kind=fwd,stages=3,warps=4",
        "x",
    };
    static const uint8_t payload[] = "\x7f" "ELF fake cubin bytes for the fuzzer";
    fg_bundle b = {NULL, 0};
    fg_error err;
    fg_error_clear(&err);
    for (size_t i = 0; i < n; i++) /* payload sizes 16, 0, 37: one empty payload among them */
        if (bundle_add(&b, names[i], payload, i == 1 ? 0 : i == 0 ? 16 : sizeof payload, &err) != FG_OK)
            break;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (err.status == FG_OK)
        bundle_write(path, &b, &err);
    bundle_free(&b);
    if (err.status != FG_OK) {
        fprintf(stderr, "fuzz_bundle_seeds: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_bundle_seeds DIR\n");
        return 2;
    }
    int bad = fuzz_bundle_seed(argv[1], "seed-empty.fgb", 0);
    bad |= fuzz_bundle_seed(argv[1], "seed-one.fgb", 1);
    bad |= fuzz_bundle_seed(argv[1], "seed-three.fgb", 3);
    return bad;
}
#endif
