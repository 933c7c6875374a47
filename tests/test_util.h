/* test_util.h: helpers the CPU suites share (test_cache.c, test_bundle.c, test_cli.c, test_tune.c): a scratch directory
 * per test under /tmp, removed afterwards, and a deterministic byte stream so failures reproduce.
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

/* Makes a fresh directory "/tmp/<prefix>-" + six random characters into dir (n bytes). */
static inline void test_scratch_make(char *dir, size_t n, const char *prefix) {
    int len = snprintf(dir, n, "/tmp/%s-XXXXXX", prefix);
    cr_assert(len > 0 && (size_t)len < n, "scratch path too long");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed: %s", strerror(errno));
}

/* Removes a directory test_scratch_make made (refuses anything not under /tmp/<prefix>-). */
static inline void test_scratch_remove(const char *dir, const char *prefix) {
    char expect[64], cmd[160];
    snprintf(expect, sizeof expect, "/tmp/%s-", prefix);
    if (!dir[0] || strncmp(dir, expect, strlen(expect)) != 0) return;
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
