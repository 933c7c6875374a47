/* cache.h: the on-disk cache of compiled kernels (cubins).
 *
 * Location: explicit directory, else $FLASHGEN_CACHE_DIR, else $XDG_CACHE_HOME/flashgen, else
 * $HOME/.cache/flashgen (never a shared /tmp path). The directory is created 0700; a directory owned by
 * another user, writable by group or others, or a symbolic link, is refused with a sentence, and so is one
 * whose path, walked as the kernel resolves it, passes through something another user could change: a
 * directory owned by someone other than root and this user or writable by group or others without the
 * sticky bit, or a symbolic link owned by another user. The
 * directory checked is remembered (device and inode): each access opens it again and works relative to
 * that descriptor (openat, renameat, unlinkat) only if it is the same directory, so a directory swapped
 * in under its path later is never read or written.
 *
 * Key: SHA-256 over everything that determines the cubin: the emitted main source (which encodes the spec),
 * the digest of the headers it is compiled with (the templates),
 * NVRTC version, compile options, target arch, generator version and the cache format version.
 * Entry file `<hex key>.cubin`, mode 0600:
 *   magic "FGCACHE\0" (8) | format version u32 LE | key (32) | name length u32 LE (<= 4096) |
 *   name (spec text, no NUL) | payload length u64 LE | checksum (32) | payload
 * The checksum is the SHA-256 of every other byte of the file (the header before it, then the payload),
 * so a flipped bit anywhere, the name included, is detected.
 * Any mismatch, truncation, extra byte or symlinked entry is a miss, never a crash and never a load.
 * Writes go to a temporary file in the same directory, fsync, rename: a writer killed at any point
 * leaves no entry that verifies; racing writers of one key are harmless. */
#ifndef FG_CACHE_H
#define FG_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/files.h"

#define FG_CACHE_FORMAT_VERSION 1u

typedef struct fg_disk_cache {
    char dir[4096];               /* absolute path of the cache directory */
    unsigned long long dev, ino;  /* the directory cache_open checked: every later access opens the path and
                                     uses it only if it is still that directory (never one swapped in) */
    unsigned long long max_bytes; /* the entries' bound (FLASHGEN_CACHE_MAX_MB; 0: none): a put past it evicts
                                     the least recently used entries */
} fg_disk_cache;

/* The default bound of a cache's entries, in MiB (FLASHGEN_CACHE_MAX_MB): about 20,000 kernels. */
#define FG_CACHE_DEFAULT_MAX_MB 4096

/* The inputs of a key. Strings are NUL-terminated; options is an array of nopts strings. */
typedef struct fg_cache_key_inputs {
    const char *source;            /* the emitted CUDA main source (the prelude) */
    size_t source_len;             /* its length */
    const char *nvrtc_version;     /* e.g. "13.0" */
    const char *const *options;    /* the NVRTC options, in order */
    int nopts;                     /* number of options */
    const char *arch;              /* "sm_90a" */
    const char *generator_version; /* FG_VERSION_STRING */
    const char *headers_digest;    /* hex SHA-256 of the headers NVRTC gets (emit_headers_digest); NULL: none */
} fg_cache_key_inputs;

void cache_key(const fg_cache_key_inputs *in, uint8_t key[32]);

/* Resolves the location (dir may be NULL), creates it if missing (0700, parents as needed) and checks it
 * is safe; reads the bound (FLASHGEN_CACHE_MAX_MB) and removes the temporary files killed writers left.
 * FG_ERR_IO with a sentence naming the directory and the rule when it is not safe. */
fg_status cache_open(fg_disk_cache *cache, const char *dir, fg_error *err);
/* The cache directory, opened again for one access (cache_dir.c): a descriptor if it is still the directory
 * cache_open checked (same device and inode, this user's, private), else -1 with the reason in why. The other
 * calls work relative to it (openat, renameat, unlinkat). */
int cache_dir_fd(const fg_disk_cache *c, char *why, size_t whylen);

/* Looks a key up. FG_OK and a malloc'd payload (caller frees) on a verified hit; FG_ERR_NOT_FOUND on a
 * miss of any kind (absent, short, corrupt, wrong key, symlink), with the reason in err for logging;
 * FG_ERR_NO_MEMORY when the entry cannot be buffered. */
fg_status cache_get(const fg_disk_cache *cache, const uint8_t key[32], uint8_t **payload, size_t *len,
                    fg_error *err);

/* Stores an entry atomically (temp file, write, fsync, rename, fsync of the directory). `name` is the
 * spec's canonical text, kept for `flashgen cache ls`. When the entries then exceed cache->max_bytes, the
 * least recently used are removed (cache_prune). A hit (cache_get) marks an entry used (its mtime, at most
 * once an hour), so entries of old NVRTC or flashgen versions, never hit again, go first. */
fg_status cache_put(const fg_disk_cache *cache, const uint8_t key[32], const char *name,
                    const uint8_t *payload, size_t len, fg_error *err);

/* Visits every entry file: cb(user, file name, spec name or NULL, payload length, verified, why not, ptx).
 * ptx is 1 when the payload is PTX text (a context under FLASHGEN_EMULATE_ARCH stores compute_XX PTX for the
 * driver to compile, under its own key but the same spec name), 0 for a cubin or an entry that does not load.
 * Used by `flashgen cache ls|verify`. Returns the number of entries visited, or -1 with err set. */
typedef void (*fg_cache_visit_fn)(void *user, const char *file, const char *name, uint64_t payload_len,
                                  int verified, const char *why_not, int ptx);
int cache_visit(const fg_disk_cache *cache, fg_cache_visit_fn cb, void *user, fg_error *err);

/* Removes every entry (and stale temporary file: `.tmp-<pid>-...` whose process is gone or older than an
 * hour) flashgen wrote in the directory; keeps other files. Returns the number removed, or -1 with err set. */
int cache_clear(const fg_disk_cache *cache, fg_error *err);

/* What the cache directory holds: entries and their bytes, temporary files (of writers alive or killed) and
 * their bytes. FG_OK, or FG_ERR_IO when the directory cannot be read. */
typedef struct fg_cache_usage {
    unsigned long long entries, entry_bytes, tmp_files, tmp_bytes;
} fg_cache_usage;
fg_status cache_usage(const fg_disk_cache *cache, fg_cache_usage *u, fg_error *err);

/* Removes the least recently used entries (oldest mtime first) until the entries' bytes are at most
 * max_bytes (0: no bound, as FLASHGEN_CACHE_MAX_MB=0 means, so no entry goes), and the abandoned temporary files. *removed and *freed (may be NULL) say what went. FG_OK, or
 * FG_ERR_IO naming the file that could not be removed. */
fg_status cache_prune(const fg_disk_cache *cache, unsigned long long max_bytes, int *removed,
                      unsigned long long *freed, fg_error *err);

#endif
