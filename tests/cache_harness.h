/* cache_harness.h: what the disk-cache suites share (test_cache.c, test_cache_guard.c): a scratch directory per
 * test under the suite's prefix, with the cache directory g_dir inside it, and helpers to open the cache, make
 * keys, name, write and read entry files and count a directory's files. Each suite includes it once. */
#ifndef FG_TESTS_CACHE_HARNESS_H
#define FG_TESTS_CACHE_HARNESS_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "core/files.h"
#include "core/sha256.h"
#include "runtime/cache.h"
#include "tests/test_util.h"

static char g_root[64];   /* this test's scratch directory */
static char g_dir[256];   /* g_root/cache, where most tests open their cache */

static inline void scratch_init(void) {
    test_scratch_make(g_root, sizeof g_root, "fg-test-cache");
    snprintf(g_dir, sizeof g_dir, "%s/cache", g_root);
}

static inline void scratch_fini(void) { test_scratch_remove(g_root, "fg-test-cache"); }

static inline fg_disk_cache open_cache(void) {
    fg_disk_cache c;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, g_dir, &err), FG_OK, "cache_open: %s", err.msg);
    return c;
}

static inline void key_of(const char *text, uint8_t key[32]) {
    const char *opts[] = {"--gpu-architecture=sm_90a", "-lineinfo"};
    fg_cache_key_inputs in = {text, strlen(text), "13.0", opts, 2, "sm_90a", "0.1.0", NULL};
    cache_key(&in, key);
}

static inline void entry_path(const fg_disk_cache *c, const uint8_t key[32], char *out, size_t n) {
    char hex[65];
    sha256_hex(key, hex);
    snprintf(out, n, "%s/%s.cubin", c->dir, hex);
}

/* Writes raw bytes to a path, non-atomically: the tests use it to plant damaged entries. */
static inline void write_raw(const char *path, const uint8_t *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, data + done, n - done);
        cr_assert(w > 0, "write %s: %s", path, strerror(errno));
        done += (size_t)w;
    }
    cr_assert_eq(close(fd), 0);
}

static inline void read_whole(const char *path, uint8_t **data, size_t *len) {
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(fg_read_file(path, data, len, &err), FG_OK, "%s", err.msg);
}

/* Counts the files in dir whose names start with prefix (NULL: all but . and ..). */
static inline int count_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "opendir %s: %s", dir, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!prefix || strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

#endif
