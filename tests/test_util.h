/* test_util.h: helpers the CPU suites share (test_cache.c, test_bundle.c, cli_harness.c, tunedb_fixtures.h,
 * test_space.c): a scratch directory per test under $TMPDIR (or /tmp), removed afterwards, and a
 * deterministic byte stream so failures reproduce.
 * Header-only (static inline functions): each test program includes it once. */
#ifndef FG_TEST_UTIL_H
#define FG_TEST_UTIL_H

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The directory scratch directories go in: $TMPDIR when it is an absolute path short enough for the
 * suites' path buffers (32 bytes), else /tmp. */
static inline const char *test_scratch_base(void) {
    const char *t = getenv("TMPDIR");
    return t && t[0] == '/' && strlen(t) <= 32 ? t : "/tmp";
}

/* Makes a fresh directory "<base>/<prefix>-" + six random characters into dir (n bytes): the X's are
 * mkdtemp's template, which it replaces. */
static inline void test_scratch_make(char *dir, size_t n, const char *prefix) {
    int len = snprintf(dir, n, "%s/%s-XXXXXX", test_scratch_base(), prefix);
    cr_assert(len > 0 && (size_t)len < n, "scratch path too long");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed: %s", strerror(errno));
}

/* Removes a directory test_scratch_make made (refuses anything not under <base>/<prefix>-). */
static inline void test_scratch_remove(const char *dir, const char *prefix) {
    char expect[128], cmd[256];
    snprintf(expect, sizeof expect, "%s/%s-", test_scratch_base(), prefix);
    if (!dir[0] || strncmp(dir, expect, strlen(expect)) != 0 || strchr(dir, '\'') != NULL) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) cr_log_warn("could not remove %s", dir);
}

/* A deterministic pseudo-random byte stream (xorshift64*), so failures reproduce. */
static inline void fill_random(uint8_t *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        p[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> 56);
    }
}

#endif
