/* cache.c: the on-disk cache of compiled kernels (see cache.h for the location rules and the entry format).
 *
 * The cache trusts nothing it reads back: a file in it may be truncated by a crash, corrupted by a disk,
 * half-written by an old version, replaced by a symlink or planted by someone else. So the directory must
 * be private (ours, 0700-like, not a symlink), entries are opened without following links, and an entry
 * is used only after every header field and the checksum (which covers header and payload) agree. Writes
 * never modify an entry in place: a complete file is built under a unique temporary name in the same
 * directory and renamed over the entry, so readers see either the old file or the new one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include "runtime/cache.h"
#include "core/little_endian.h"
#include "core/files.h"
#include "core/sha256.h"
#include "core/alloc.h"

/* Entry layout offsets; NAME is where the variable-length spec name starts. */
enum {
    ENTRY_MAGIC = 0,    /* "FGCACHE\0" */
    ENTRY_VERSION = 8,  /* u32 LE */
    ENTRY_KEY = 12,     /* 32 bytes */
    ENTRY_NAMELEN = 44, /* u32 LE */
    ENTRY_NAME = 48,    /* name bytes, then payload length u64 LE, checksum (32), payload */
    ENTRY_FIXED = 88,   /* bytes of an entry besides its name and payload */
};

/* A spec's canonical text is far shorter; the bound keeps a corrupt length from meaning anything. */
#define CACHE_NAME_MAX 4096u
/* Cubins are kilobytes to a few megabytes; a larger entry is refused rather than buffered. */
#define CACHE_PAYLOAD_MAX ((uint64_t)1 << 30)

static const uint8_t entry_magic[8] = {'F', 'G', 'C', 'A', 'C', 'H', 'E', '\0'};



/* Hashes one key ingredient as (present flag, u64 length, bytes): lengths make the encoding of the input
 * list injective, so no two different input lists can produce the same hashed byte stream, and the flag
 * keeps a missing value distinct from an empty one. */
static void key_field(fg_sha256 *s, const void *data, size_t n) {
    uint8_t head[9];
    head[0] = data != NULL;
    put_le64(head + 1, data ? (uint64_t)n : 0);
    sha256_update(s, head, sizeof head);
    if (data)
        sha256_update(s, data, n);
}

/* Computes the cache key of a compile (see cache.h for what goes in). A NULL string counts as absent,
 * which differs from "". Options are hashed in order, after their count. Cannot fail. */
void cache_key(const fg_cache_key_inputs *in, uint8_t key[32]) {
    static const char domain[] = "flashgen-cache";
    fg_sha256 s;
    uint8_t word[8];
    sha256_init(&s);
    key_field(&s, domain, sizeof domain - 1);
    put_le32(word, FG_CACHE_FORMAT_VERSION);
    sha256_update(&s, word, 4);
    key_field(&s, in->source, in->source ? in->source_len : 0);
    key_field(&s, in->nvrtc_version, in->nvrtc_version ? strlen(in->nvrtc_version) : 0);
    int nopts = in->options && in->nopts > 0 ? in->nopts : 0;
    put_le64(word, (uint64_t)nopts);
    sha256_update(&s, word, 8);
    for (int i = 0; i < nopts; i++)
        key_field(&s, in->options[i], in->options[i] ? strlen(in->options[i]) : 0);
    key_field(&s, in->arch, in->arch ? strlen(in->arch) : 0);
    key_field(&s, in->generator_version, in->generator_version ? strlen(in->generator_version) : 0);
    key_field(&s, in->headers_digest, in->headers_digest ? strlen(in->headers_digest) : 0);
    sha256_final(&s, key);
}

/* True for the file names cache_put writes: 64 lower-case hex digits and ".cubin". */
static int is_entry_name(const char *name) {
    if (strlen(name) != 70 || strcmp(name + 64, ".cubin") != 0)
        return 0;
    for (int i = 0; i < 64; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return 0;
    return 1;
}

/* Decodes the 64 hex digits of an entry name into the key they stand for. */
static void key_from_name(const char *name, uint8_t key[32]) {
    for (int i = 0; i < 32; i++) {
        int hi = name[2 * i] <= '9' ? name[2 * i] - '0' : name[2 * i] - 'a' + 10;
        int lo = name[2 * i + 1] <= '9' ? name[2 * i + 1] - '0' : name[2 * i + 1] - 'a' + 10;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
}

/* What entry_check learned about an entry; fields are valid as far as parsing got. */
typedef struct entry_view {
    int have_name;        /* 1 once the name length was in bounds and the name lay inside the file */
    size_t name_off;      /* offset of the name bytes */
    size_t name_len;      /* their count */
    int have_len;         /* 1 once the payload length field was readable */
    uint64_t payload_len; /* the payload length the header claims */
    size_t payload_off;   /* offset of the payload */
} entry_view;

/* Verifies an entry image against the key it must hold. Returns 1 when every field agrees and the
 * checksum matches; 0 otherwise with a reason (a phrase for "entry ... is a miss: <why>") in why. */
static int entry_check(const uint8_t *buf, size_t size, const uint8_t key[32], entry_view *v, char *why,
                       size_t whylen) {
    memset(v, 0, sizeof *v);
    if (size < ENTRY_FIXED) {
        snprintf(why, whylen, "it is %zu bytes, shorter than the %d-byte header", size, ENTRY_FIXED);
        return 0;
    }
    if (memcmp(buf + ENTRY_MAGIC, entry_magic, sizeof entry_magic) != 0) {
        snprintf(why, whylen, "its magic is not \"FGCACHE\"");
        return 0;
    }
    uint32_t version = get_le32(buf + ENTRY_VERSION);
    if (version != FG_CACHE_FORMAT_VERSION) {
        snprintf(why, whylen, "its format version is %u, this flashgen writes %u", version,
                 FG_CACHE_FORMAT_VERSION);
        return 0;
    }
    uint32_t name_len = get_le32(buf + ENTRY_NAMELEN);
    if (name_len > CACHE_NAME_MAX) {
        snprintf(why, whylen, "its name length %u exceeds %u", name_len, CACHE_NAME_MAX);
        return 0;
    }
    if (size - ENTRY_FIXED < name_len) {
        snprintf(why, whylen, "it is %zu bytes, too short for its %u-byte name", size, name_len);
        return 0;
    }
    v->have_name = 1;
    v->name_off = ENTRY_NAME;
    v->name_len = name_len;
    v->have_len = 1;
    v->payload_len = get_le64(buf + ENTRY_NAME + name_len);
    v->payload_off = ENTRY_FIXED + name_len;
    if (memchr(buf + ENTRY_NAME, '\0', name_len)) {
        snprintf(why, whylen, "its name contains a NUL byte");
        return 0;
    }
    if (memcmp(buf + ENTRY_KEY, key, 32) != 0) {
        snprintf(why, whylen, "the key it holds is not the key looked up");
        return 0;
    }
    size_t remaining = size - v->payload_off;
    if (v->payload_len != (uint64_t)remaining) {
        snprintf(why, whylen, "its header claims a %llu-byte payload but %zu bytes follow",
                 (unsigned long long)v->payload_len, remaining);
        return 0;
    }
    uint8_t sum[32];
    fg_sha256 s;
    sha256_init(&s);
    sha256_update(&s, buf, v->payload_off - 32);
    sha256_update(&s, buf + v->payload_off, remaining);
    sha256_final(&s, sum);
    if (memcmp(sum, buf + v->payload_off - 32, 32) != 0) {
        snprintf(why, whylen, "its checksum does not match its contents");
        return 0;
    }
    return 1;
}

/* Loads the entry file `file` of the cache directory open as dfd (cache_dir_fd) without following symlinks
 * (O_NOFOLLOW; O_NONBLOCK so a FIFO planted under an entry name cannot block us) and only if it is a regular
 * file of plausible size; *mtime (may be NULL) gets its last use. FG_OK with a malloc'd image;
 * FG_ERR_NOT_FOUND with the reason in why; FG_ERR_NO_MEMORY. */
static fg_status entry_load(int dfd, const char *file, uint8_t **image, size_t *size, time_t *mtime, char *why,
                            size_t whylen) {
    *image = NULL;
    *size = 0;
    int fd = openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            snprintf(why, whylen, "there is no such file");
        else if (errno == ELOOP)
            snprintf(why, whylen, "it is a symbolic link, which the cache never follows");
        else
            snprintf(why, whylen, "it cannot be opened: %s", strerror(errno));
        return FG_ERR_NOT_FOUND;
    }
    struct stat st;
    fg_status status = FG_ERR_NOT_FOUND;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0)
        snprintf(why, whylen, "it cannot be stat'ed: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        snprintf(why, whylen, "it is not a regular file");
    else if (st.st_size < ENTRY_FIXED)
        snprintf(why, whylen, "it is %lld bytes, shorter than the %d-byte header", (long long)st.st_size,
                 ENTRY_FIXED);
    else if ((uint64_t)st.st_size > ENTRY_FIXED + CACHE_NAME_MAX + CACHE_PAYLOAD_MAX)
        snprintf(why, whylen, "it is %lld bytes, larger than any entry flashgen writes", (long long)st.st_size);
    else if (!(buf = fg_malloc((size_t)st.st_size))) {
        snprintf(why, whylen, "out of memory buffering its %lld bytes", (long long)st.st_size);
        status = FG_ERR_NO_MEMORY;
    } else if (file_read_exact(fd, buf, (size_t)st.st_size) != 0)
        snprintf(why, whylen, "reading it failed: %s", strerror(errno));
    else
        status = FG_OK;
    if (mtime) *mtime = st.st_mtime;
    close(fd); /* read-only descriptor: a close error cannot lose data */
    if (status != FG_OK) {
        free(buf);
        return status;
    }
    *image = buf;
    *size = (size_t)st.st_size;
    return FG_OK;
}

/* Looks a key up (see cache.h). FG_OK with a malloc'd payload (caller frees; a 0-byte payload still
 * gets a non-NULL 1-byte allocation); FG_ERR_NOT_FOUND for any miss with the reason in err;
 * FG_ERR_NO_MEMORY when the entry could not be buffered; FG_ERR_INVALID_ARGUMENT for NULL pointers. */
fg_status cache_get(const fg_disk_cache *cache, const uint8_t key[32], uint8_t **payload, size_t *len,
                    fg_error *err) {
    if (!payload || !len)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_get: payload and len must not be NULL.");
    *payload = NULL;
    *len = 0;
    if (!cache || !key || !cache->dir[0])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_get: the cache is not open or the key is NULL.");
    char file[80], hex[65], why[512];
    sha256_hex(key, hex);
    snprintf(file, sizeof file, "%s.cubin", hex);
    uint8_t *image;
    size_t size;
    time_t used = 0;
    const int dfd = cache_dir_fd(cache, why, sizeof why);
    if (dfd < 0) return fg_fail(err, FG_ERR_NOT_FOUND, "cache entry '%s/%s' is a miss: %s.", cache->dir, file, why);
    fg_status st = entry_load(dfd, file, &image, &size, &used, why, sizeof why);
    if (st != FG_OK) {
        close(dfd);
        return fg_fail(err, st, "cache entry '%s/%s' %s: %s.", cache->dir, file,
                       st == FG_ERR_NO_MEMORY ? "could not be read" : "is a miss", why);
    }
    entry_view v;
    if (!entry_check(image, size, key, &v, why, sizeof why)) {
        free(image);
        close(dfd);
        return fg_fail(err, FG_ERR_NOT_FOUND, "cache entry '%s/%s' is a miss: %s.", cache->dir, file, why);
    }
    size_t n = (size_t)v.payload_len;
    uint8_t *out = fg_malloc(n ? n : 1);
    if (!out) {
        free(image);
        close(dfd);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory copying the %zu-byte payload of cache entry '%s'.", n,
                       file);
    }
    if (n)
        memcpy(out, image + v.payload_off, n);
    free(image);
    /* A hit marks the entry used, for the bound's least-recently-used eviction; at most once an hour, so a
     * hot entry costs no write. Best effort: a read-only cache still serves. */
    if (time(NULL) - used > 3600) utimensat(dfd, file, NULL, AT_SYMLINK_NOFOLLOW);
    close(dfd);
    *payload = out;
    *len = n;
    return FG_OK;
}

/* Stores an entry (see cache.h). The entry is assembled in memory, then written with
 * fg_write_file_atomic, so readers and racing writers only ever see whole entries. name may be NULL
 * (stored as empty). FG_ERR_INVALID_ARGUMENT for a missing key, a name over 4096 bytes or a payload over
 * 1 GiB; FG_ERR_NO_MEMORY; FG_ERR_IO from the write. */
fg_status cache_put(const fg_disk_cache *cache, const uint8_t key[32], const char *name, const uint8_t *payload,
                    size_t len, fg_error *err) {
    if (!cache || !key || !cache->dir[0])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_put: the cache is not open or the key is NULL.");
    if (!payload && len > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_put: payload is NULL but len is %zu.", len);
    size_t name_len = name ? strlen(name) : 0;
    if (name_len > CACHE_NAME_MAX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_put: the entry name is %zu bytes; the limit is %u.",
                       name_len, CACHE_NAME_MAX);
    if ((uint64_t)len > CACHE_PAYLOAD_MAX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "cache_put: the payload of '%s' is %zu bytes; the cache holds entries up to %llu bytes.",
                       name ? name : "", len, (unsigned long long)CACHE_PAYLOAD_MAX);
    size_t size = ENTRY_FIXED + name_len + len;
    uint8_t *buf = fg_malloc(size);
    if (!buf)
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory building a %zu-byte cache entry.", size);
    memcpy(buf + ENTRY_MAGIC, entry_magic, sizeof entry_magic);
    put_le32(buf + ENTRY_VERSION, FG_CACHE_FORMAT_VERSION);
    memcpy(buf + ENTRY_KEY, key, 32);
    put_le32(buf + ENTRY_NAMELEN, (uint32_t)name_len);
    if (name_len)
        memcpy(buf + ENTRY_NAME, name, name_len);
    put_le64(buf + ENTRY_NAME + name_len, (uint64_t)len);
    size_t sum_off = ENTRY_NAME + name_len + 8;
    if (len)
        memcpy(buf + sum_off + 32, payload, len);
    fg_sha256 s;
    sha256_init(&s);
    sha256_update(&s, buf, sum_off);
    sha256_update(&s, buf + sum_off + 32, len);
    sha256_final(&s, buf + sum_off);

    char file[80], hex[65], why[512];
    sha256_hex(key, hex);
    snprintf(file, sizeof file, "%s.cubin", hex);
    const int dfd = cache_dir_fd(cache, why, sizeof why);
    fg_status st = dfd < 0 ? fg_fail(err, FG_ERR_IO, "cannot store cache entry '%s': %s.", file, why)
                           : fg_write_file_atomic_at(dfd, cache->dir, file, buf, size, 0600, err);
    if (dfd >= 0) close(dfd);
    free(buf);
    if (st == FG_OK && cache->max_bytes > 0) { /* the bound (one listing; removes only past it): best effort */
        fg_error ignored;
        cache_prune(cache, cache->max_bytes, NULL, NULL, &ignored);
    }
    return st;
}

/* Frees a name list from list_dir. */
static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists the names in dir accepted by keep(), sorted, into a malloc'd array of malloc'd strings (the
 * listing is taken whole before anything is removed, since readdir during unlink is unspecified).
 * FG_OK, FG_ERR_IO naming the directory, or FG_ERR_NO_MEMORY. */
/* The pinned cache directory as a DIR stream (cache_dir_fd), or NULL with err set. */
static DIR *cache_opendir(const fg_disk_cache *cache, fg_error *err) {
    char why[512];
    const int fd = cache_dir_fd(cache, why, sizeof why);
    if (fd < 0) {
        fg_fail(err, FG_ERR_IO, "cannot read the cache directory '%s': %s.", cache->dir, why);
        return NULL;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        fg_fail(err, FG_ERR_IO, "cannot read the cache directory '%s': %s.", cache->dir, strerror(errno));
        close(fd);
    }
    return d;
}

static fg_status list_dir(const fg_disk_cache *cache, int (*keep)(const char *), char ***names, size_t *count,
                          fg_error *err) {
    const char *dir = cache->dir;
    *names = NULL;
    *count = 0;
    DIR *d = cache_opendir(cache, err);
    if (!d)
        return err->status;
    char **list = NULL;
    size_t n = 0, cap = 0;
    fg_status st = FG_OK;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno != 0)
                st = fg_fail(err, FG_ERR_IO, "cannot list the cache directory '%s': %s.", dir, strerror(errno));
            break;
        }
        if (!keep(e->d_name))
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **grown = fg_realloc(list, ncap * sizeof *list);
            if (!grown) {
                st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory listing the cache directory '%s'.", dir);
                break;
            }
            list = grown;
            cap = ncap;
        }
        if (!(list[n] = fg_strdup(e->d_name))) {
            st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory listing the cache directory '%s'.", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (st != FG_OK) {
        free_names(list, n);
        return st;
    }
    if (n > 1)
        qsort(list, n, sizeof *list, cmp_names);
    *names = list;
    *count = n;
    return FG_OK;
}

/* Visits every entry file in name order (see cache.h). The callback gets the file's base name, the spec
 * name when the header was readable that far (else NULL), the claimed payload length (0 when unknown),
 * whether the entry verifies, and if not why (a phrase). cb may be NULL to only count. */
int cache_visit(const fg_disk_cache *cache, fg_cache_visit_fn cb, void *user, fg_error *err) {
    if (!cache || !cache->dir[0]) {
        fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_visit: the cache is not open.");
        return -1;
    }
    char **names;
    size_t count;
    if (list_dir(cache, is_entry_name, &names, &count, err) != FG_OK)
        return -1;
    char why[512];
    const int dfd = cache_dir_fd(cache, why, sizeof why);
    if (dfd < 0) {
        free_names(names, count);
        fg_fail(err, FG_ERR_IO, "cannot read the cache directory '%s': %s.", cache->dir, why);
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        uint8_t key[32], *image;
        size_t size;
        char name[CACHE_NAME_MAX + 1];
        key_from_name(names[i], key);
        fg_status st = entry_load(dfd, names[i], &image, &size, NULL, why, sizeof why);
        if (st != FG_OK) {
            if (cb)
                cb(user, names[i], NULL, 0, 0, why, 0);
            continue;
        }
        entry_view v;
        int ok = entry_check(image, size, key, &v, why, sizeof why);
        if (v.have_name) {
            memcpy(name, image + v.name_off, v.name_len);
            name[v.name_len] = '\0';
        }
        /* PTX (NVRTC's starts with a "//" comment, a hand-written one may start at .version) against a cubin
         * (an ELF image) */
        int ptx = 0;
        if (ok) {
            const uint8_t *pl = image + v.payload_off;
            const size_t pn = size - v.payload_off;
            ptx = (pn >= 2 && pl[0] == '/' && pl[1] == '/') || (pn >= 8 && memcmp(pl, ".version", 8) == 0);
        }
        if (cb)
            cb(user, names[i], v.have_name ? name : NULL, v.have_len ? v.payload_len : 0, ok, ok ? NULL : why, ptx);
        free(image);
    }
    close(dfd);
    free_names(names, count);
    return count > INT_MAX ? INT_MAX : (int)count;
}

/* True for a name that is a flashgen entry or looks like one of its temporary files. */
static int is_clearable_name(const char *name) {
    return is_entry_name(name) || strncmp(name, FG_TMP_PREFIX, sizeof FG_TMP_PREFIX - 1) == 0;
}


/* Removes every entry file and every stale temporary file (fg_tmp_is_stale) from the cache directory;
 * other files, directories and temporary files of live writers stay. Returns the number removed, or -1
 * with err set on the first removal that fails. */
int cache_clear(const fg_disk_cache *cache, fg_error *err) {
    if (!cache || !cache->dir[0]) {
        fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_clear: the cache is not open.");
        return -1;
    }
    char **names;
    size_t count;
    if (list_dir(cache, is_clearable_name, &names, &count, err) != FG_OK)
        return -1;
    int removed = 0;
    char why[512];
    const int dfd = cache_dir_fd(cache, why, sizeof why);
    if (dfd < 0) {
        free_names(names, count);
        fg_fail(err, FG_ERR_IO, "cannot clear the cache directory '%s': %s.", cache->dir, why);
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        char path[4096 + 300];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", cache->dir, names[i]);
        if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT)
                continue; /* a concurrent clear or rename got there first */
            fg_fail(err, FG_ERR_IO, "cannot stat '%s' while clearing the cache: %s.", path, strerror(errno));
            removed = -1;
            break;
        }
        if (S_ISDIR(st.st_mode))
            continue;
        if (!is_entry_name(names[i]) && !fg_tmp_is_stale(names[i], &st))
            continue;
        if (unlinkat(dfd, names[i], 0) != 0) {
            if (errno == ENOENT)
                continue;
            fg_fail(err, FG_ERR_IO, "cannot remove '%s' while clearing the cache: %s.", path, strerror(errno));
            removed = -1;
            break;
        }
        if (removed < INT_MAX)
            removed++;
    }
    close(dfd);
    free_names(names, count);
    return removed;
}

fg_status cache_usage(const fg_disk_cache *cache, fg_cache_usage *u, fg_error *err) {
    memset(u, 0, sizeof *u);
    if (!cache || !cache->dir[0]) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_usage: the cache is not open.");
    DIR *d = cache_opendir(cache, err);
    if (!d) return err->status;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        const int entry = is_entry_name(e->d_name), tmp = strncmp(e->d_name, FG_TMP_PREFIX, sizeof FG_TMP_PREFIX - 1) == 0;
        if ((!entry && !tmp) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (entry) u->entries++, u->entry_bytes += (unsigned long long)st.st_size;
        else u->tmp_files++, u->tmp_bytes += (unsigned long long)st.st_size;
    }
    closedir(d);
    return FG_OK;
}

/* One entry file for eviction: its name, bytes and last use. */
typedef struct lru_entry {
    char name[80];
    unsigned long long bytes;
    struct timespec used;
} lru_entry;

static int lru_older(const void *a, const void *b) {
    const lru_entry *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec) return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec) return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

fg_status cache_prune(const fg_disk_cache *cache, unsigned long long max_bytes, int *removed,
                      unsigned long long *freed, fg_error *err) {
    if (removed) *removed = 0;
    if (freed) *freed = 0;
    if (!cache || !cache->dir[0]) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cache_prune: the cache is not open.");
    DIR *d = cache_opendir(cache, err);
    if (!d) return err->status;
    unsigned long long tmp_bytes = 0;
    int n_tmp = fg_reap_tmp_files_at(dirfd(d), NULL, &tmp_bytes);
    lru_entry *v = NULL;
    size_t n = 0, cap = 0;
    unsigned long long total = 0;
    struct dirent *e;
    fg_status st = FG_OK;
    while ((e = readdir(d)) != NULL) {
        struct stat fst;
        if (!is_entry_name(e->d_name) || fstatat(dirfd(d), e->d_name, &fst, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(fst.st_mode))
            continue;
        if (n == cap) {
            lru_entry *g = fg_realloc(v, (cap = cap ? 2 * cap : 256) * sizeof *v);
            if (!g) {
                st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory listing the cache to prune it.");
                break;
            }
            v = g;
        }
        memcpy(v[n].name, e->d_name, strlen(e->d_name) + 1); /* an entry name: 70 bytes (is_entry_name) */
        v[n].bytes = (unsigned long long)fst.st_size;
        v[n].used = fst.st_mtim;
        total += v[n].bytes;
        n++;
    }
    int gone = n_tmp;
    unsigned long long out = tmp_bytes;
    if (st == FG_OK && max_bytes > 0 && total > max_bytes) { /* 0: no bound, as FLASHGEN_CACHE_MAX_MB=0 */
        if (n > 1) qsort(v, n, sizeof *v, lru_older);
        for (size_t i = 0; i < n && total > max_bytes; i++) {
            char path[4096 + 96];
            snprintf(path, sizeof path, "%s/%s", cache->dir, v[i].name);
            if (unlinkat(dirfd(d), v[i].name, 0) != 0 && errno != ENOENT) {
                st = fg_fail(err, FG_ERR_IO, "cannot remove '%s' while pruning the cache: %s.", path, strerror(errno));
                break;
            }
            total -= v[i].bytes, out += v[i].bytes, gone++;
        }
    }
    closedir(d);
    free(v);
    if (removed) *removed = gone;
    if (freed) *freed = out;
    return st;
}
