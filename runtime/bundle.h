/* bundle.h: ahead-of-time kernel bundles (`flashgen bundle`), read by fg_bundle_load.
 *
 * File layout (all integers little-endian):
 *   magic "FGBUNDL\0" (8) | format version u32 | entry count u32 | generator version (16, NUL-padded) |
 *   index: per entry { name length u32 | name (spec canonical text) | offset u64 | size u64 | SHA-256 (32) } |
 *   index SHA-256 (32, over everything before it) | payloads (cubins) at their offsets
 * Offsets count from the start of the bundle. The layout is canonical: index entries sorted by name
 * (strcmp order), names 1..4096 bytes without NUL and unique, payloads back to back in index order from
 * right after the index checksum, and the bundle ends exactly at the end of the last payload.
 * Reading verifies the magic, version, index checksum, the generator version (it must be this flashgen's:
 * kernels of another version may expect another parameter layout), the names, the bounds of every entry
 * and each payload's checksum; anything else is FG_ERR_FORMAT with a sentence. */
#ifndef FG_BUNDLE_H
#define FG_BUNDLE_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

#define FG_BUNDLE_FORMAT_VERSION 1u
/* The largest bundle file read (the default bundle is tens of MiB): a larger file is refused before a byte
 * of it is read. */
#define FG_BUNDLE_MAX_BYTES ((size_t)1 << 30)

typedef struct fg_bundle_entry {
    char *name;       /* spec canonical text (owned) */
    uint8_t *data;    /* cubin bytes (owned) */
    size_t size;      /* bytes */
} fg_bundle_entry;

typedef struct fg_bundle {
    fg_bundle_entry *entries; /* sorted by name */
    size_t count;             /* entries */
} fg_bundle;

/* Serializes entries (sorted by name in the output) to memory (malloc'd, caller frees). */
fg_status bundle_serialize(const fg_bundle *bundle, uint8_t **out, size_t *len, fg_error *err);
/* Writes the bundle file atomically. */
fg_status bundle_write(const char *path, const fg_bundle *bundle, fg_error *err);
/* Writes a C source defining `const unsigned char SYMBOL[]` and `const unsigned long SYMBOL_size`
 * holding the serialized bundle, for fg_bundle_load_memory. Atomic. */
fg_status bundle_write_c(const char *path, const char *symbol, const fg_bundle *bundle, fg_error *err);
/* One index entry as bundle_inspect reads it. */
typedef struct bundle_item {
    const char *name;  /* inside the inspected bytes, not NUL-terminated */
    size_t name_len;   /* bytes of name */
    size_t offset;     /* of the payload, from the start of the bundle */
    size_t size;       /* payload bytes */
    int sum_ok;        /* 1 when the payload matches its SHA-256 */
} bundle_item;

/* A bundle's index without its payloads, for `flashgen bundle ls` and `bundle verify`. */
typedef struct bundle_index {
    bundle_item *items;  /* in index (name) order; owned */
    size_t count;        /* entries */
    char generator[17];  /* the flashgen (version+templates hash) the bundle names as its maker */
    int generator_ok;    /* 1 when that is this flashgen, whose fg_bundle_load accepts the bundle */
} bundle_index;

/* Checks a serialized bundle's structure and reads its index, recording (not refusing) a foreign generator
 * and payloads that do not match their checksums. Item names point into data. Free with bundle_index_free. */
fg_status bundle_inspect(const uint8_t *data, size_t len, bundle_index *out, fg_error *err);
void bundle_index_free(bundle_index *index);
/* Parses and verifies a serialized bundle; copies what it keeps. */
fg_status bundle_parse(const uint8_t *data, size_t len, fg_bundle *out, fg_error *err);
fg_status bundle_read(const char *path, fg_bundle *out, fg_error *err);
/* Finds an entry by name (binary search), or NULL. */
const fg_bundle_entry *bundle_find(const fg_bundle *bundle, const char *name);
/* Adds an entry (copies name and data); FG_ERR_INVALID_ARGUMENT if the name is already there. */
fg_status bundle_add(fg_bundle *bundle, const char *name, const uint8_t *data, size_t size, fg_error *err);
void bundle_free(fg_bundle *bundle);

#endif
