/* test_cache.c: SHA-256 and the on-disk kernel cache (core/sha256.c, runtime/cache.c).
 *
 * The cases: standard SHA-256 vectors; round trips; a key that changes with every input;
 * every truncation and bit flip of an entry detected as a miss; writers killed at random points never
 * leaving an entry that loads with wrong content; many processes filling one key; unsafe directories and
 * symlinked entries refused; the location rules; cache_clear keeping unrelated files. Each test works in
 * its own mkdtemp directory under /tmp, removed afterwards. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "runtime/cache.h"
#include "core/knobs.h"
#include "core/sha256.h"
#include "tests/test_util.h"

#include "tests/cache_harness.h"

TestSuite(sha256);
TestSuite(cache, .init = scratch_init, .fini = scratch_fini);

static void hex_of(const void *data, size_t n, char out[65]) {
    uint8_t d[32];
    sha256(data, n, d);
    sha256_hex(d, out);
}

/* ---------------------------------------------------------------- SHA-256 */

Test(sha256, fips_180_vectors) {
    char hex[65];
    hex_of("", 0, hex);
    cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, hex);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m448, strlen(m448), hex);
    cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                       "mnopqrstnopqrstu";
    hex_of(m896, strlen(m896), hex);
    cr_assert_str_eq(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

    char *million = malloc(1000000);
    cr_assert_not_null(million);
    memset(million, 'a', 1000000);
    hex_of(million, 1000000, hex);
    cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

    /* The same million bytes fed in uneven pieces, crossing block boundaries every way. */
    static const size_t pieces[] = {1, 55, 56, 63, 64, 65, 127, 128, 1000, 4093};
    fg_sha256 s;
    sha256_init(&s);
    size_t done = 0;
    for (int i = 0; done < 1000000; i++) {
        size_t n = pieces[i % 10];
        if (n > 1000000 - done)
            n = 1000000 - done;
        sha256_update(&s, million + done, n);
        done += n;
    }
    sha256_update(&s, NULL, 0);
    uint8_t d[32];
    sha256_final(&s, d);
    sha256_hex(d, hex);
    cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
}

/* Every length around the padding boundaries (55/56/64 bytes and their multiples) against coreutils'
 * sha256sum, an independent implementation. */
Test(sha256, matches_sha256sum_at_every_length_to_200) {
    if (system("command -v sha256sum >/dev/null 2>&1") != 0)
        cr_skip("sha256sum is not installed, so there is no independent implementation to compare with");
    char path[] = "/tmp/fg-test-sha-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    uint8_t buf[200];
    for (size_t n = 0; n <= 200; n++) {
        fill_random(buf, n, n + 7);
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(buf, 1, n, f), n);
        cr_assert_eq(fclose(f), 0);
        char cmd[128], want[65] = {0}, got[65];
        snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
        FILE *p = popen(cmd, "r");
        cr_assert_not_null(p);
        cr_assert_eq(fscanf(p, "%64s", want), 1);
        pclose(p);
        hex_of(buf, n, got);
        cr_assert_str_eq(got, want, "length %zu", n);
    }
    unlink(path);
}

/* ---------------------------------------------------------------- helpers for the cache tests */

/* Expects a miss and returns nothing; any hit here would be a load of damaged code. */
static void expect_miss(const fg_disk_cache *c, const uint8_t key[32], const char *what, size_t at) {
    uint8_t *p = (uint8_t *)"sentinel";
    size_t n = 12345;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = cache_get(c, key, &p, &n, &err);
    cr_assert_eq(st, FG_ERR_NOT_FOUND, "%s at %zu was not a miss (status %d)", what, at, (int)st);
    cr_assert_null(p, "a miss must not return a payload");
    cr_assert_eq(n, 0);
    cr_assert(strlen(err.msg) > 0, "a miss must say why");
}

/* ---------------------------------------------------------------- round trips and keys */

Test(cache, put_get_round_trip) {
    fg_disk_cache c = open_cache();
    struct stat st;
    cr_assert_eq(lstat(c.dir, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700, "a new cache directory must be 0700, is %o", st.st_mode & 0777);
    cr_assert_eq(c.dir[0], '/');

    static const size_t sizes[] = {0, 1, 100, 65536, 3 << 20};
    for (int i = 0; i < 5; i++) {
        size_t n = sizes[i];
        uint8_t *payload = malloc(n ? n : 1), key[32];
        cr_assert_not_null(payload);
        fill_random(payload, n, (uint64_t)i);
        char text[32];
        snprintf(text, sizeof text, "variant-%d", i);
        key_of(text, key);
        fg_error err;
        fg_error_clear(&err);
        cr_assert_eq(cache_put(&c, key, text, payload, n, &err), FG_OK, "%s", err.msg);
        uint8_t *got;
        size_t len;
        cr_assert_eq(cache_get(&c, key, &got, &len, &err), FG_OK, "%s", err.msg);
        cr_assert_not_null(got);
        cr_assert_eq(len, n);
        cr_assert(n == 0 || memcmp(got, payload, n) == 0);
        char path[4200];
        entry_path(&c, key, path, sizeof path);
        cr_assert_eq(lstat(path, &st), 0);
        cr_assert(S_ISREG(st.st_mode));
        cr_assert_eq(st.st_mode & 0777, 0600, "an entry must be 0600, is %o", st.st_mode & 0777);
        free(got);
        free(payload);
    }
    cr_assert_eq(count_files(c.dir, ".tmp-"), 0, "no temporary file may remain after cache_put");

    /* Replacing an entry gives the new payload. */
    uint8_t key[32], *got;
    size_t len;
    key_of("variant-1", key);
    cr_assert_eq(cache_put(&c, key, "variant-1", (const uint8_t *)"new", 3, NULL), FG_OK);
    cr_assert_eq(cache_get(&c, key, &got, &len, NULL), FG_OK);
    cr_assert_eq(len, 3);
    cr_assert_eq(memcmp(got, "new", 3), 0);
    free(got);
}

Test(cache, absent_key_is_a_miss_that_says_why) {
    fg_disk_cache c = open_cache();
    uint8_t key[32];
    key_of("never stored", key);
    expect_miss(&c, key, "absent entry", 0);
    fg_error err;
    uint8_t *p;
    size_t n;
    fg_error_clear(&err);
    cache_get(&c, key, &p, &n, &err);
    cr_assert_not_null(strstr(err.msg, c.dir), "the reason names the entry: %s", err.msg);
}

Test(cache, key_changes_with_every_input) {
    const char *src = "__global__ void k() {}";
    const char *opts[] = {"--gpu-architecture=sm_90a", "-lineinfo", "--std=c++17"};
    fg_cache_key_inputs base = {src, strlen(src), "13.0", opts, 3, "sm_90a", "0.1.0", "digest"};
    uint8_t k0[32], k1[32], k[16][32];
    cache_key(&base, k0);
    cache_key(&base, k1);
    cr_assert_eq(memcmp(k0, k1, 32), 0, "the key must be deterministic");

    int n = 0;
    fg_cache_key_inputs v;
    const char *src2 = "__global__ void k() {} ";
    v = base; v.source = src2; v.source_len = strlen(src2); cache_key(&v, k[n++]);  /* source text */
    v = base; v.source_len = strlen(src) - 1; cache_key(&v, k[n++]);                /* source length */
    v = base; v.nvrtc_version = "13.1"; cache_key(&v, k[n++]);                      /* NVRTC version */
    const char *o2[] = {"--gpu-architecture=sm_90a", "-lineinfo", "--std=c++20"};
    v = base; v.options = o2; cache_key(&v, k[n++]);                                 /* an option */
    v = base; v.nopts = 2; cache_key(&v, k[n++]);                                    /* one option fewer */
    const char *o3[] = {"-lineinfo", "--gpu-architecture=sm_90a", "--std=c++17"};
    v = base; v.options = o3; cache_key(&v, k[n++]);                                 /* option order */
    v = base; v.arch = "sm_90"; cache_key(&v, k[n++]);                               /* sm_90 is not sm_90a */
    v = base; v.generator_version = "0.1.1"; cache_key(&v, k[n++]);                 /* generator version */
    v = base; v.headers_digest = "digesu"; cache_key(&v, k[n++]);                    /* a template's text */
    v = base; v.headers_digest = NULL; cache_key(&v, k[n++]);                        /* no headers */
    /* Concatenation ambiguity: {"a","b"} vs {"ab"} vs {"ab",""}, and moving text between fields. */
    const char *ab[] = {"a", "b"}, *ab1[] = {"ab"}, *ab2[] = {"ab", ""};
    v = base; v.options = ab; v.nopts = 2; cache_key(&v, k[n++]);
    v = base; v.options = ab1; v.nopts = 1; cache_key(&v, k[n++]);
    v = base; v.options = ab2; v.nopts = 2; cache_key(&v, k[n++]);
    v = base; v.nvrtc_version = "13.0s"; v.arch = "m_90a"; cache_key(&v, k[n++]);
    v = base; v.nvrtc_version = ""; cache_key(&v, k[n++]);
    v = base; v.nvrtc_version = NULL; cache_key(&v, k[n++]);                        /* absent is not empty */

    for (int i = 0; i < n; i++) {
        cr_assert_neq(memcmp(k[i], k0, 32), 0, "variation %d did not change the key", i);
        for (int j = 0; j < i; j++)
            cr_assert_neq(memcmp(k[i], k[j], 32), 0, "variations %d and %d give the same key", i, j);
    }
}

/* ---------------------------------------------------------------- damaged entries */

/* Stores one small entry and returns its key and file image. */
static void store_sample(const fg_disk_cache *c, uint8_t key[32], uint8_t **image, size_t *size, char *path,
                         size_t pathlen) {
    uint8_t payload[300];
    fill_random(payload, sizeof payload, 99);
    key_of("sample", key);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_put(c, key, "dtype=bf16 head_dim=128", payload, sizeof payload, &err), FG_OK, "%s",
                 err.msg);
    entry_path(c, key, path, pathlen);
    read_whole(path, image, size);
    cr_assert_eq(*size, 88 + strlen("dtype=bf16 head_dim=128") + sizeof payload);
}

Test(cache, truncation_at_every_length_is_a_miss) {
    fg_disk_cache c = open_cache();
    uint8_t key[32], *image;
    size_t size;
    char path[4200];
    store_sample(&c, key, &image, &size, path, sizeof path);
    for (size_t n = 0; n < size; n++) {
        write_raw(path, image, n);
        expect_miss(&c, key, "truncation", n);
    }
    write_raw(path, image, size);
    uint8_t *got;
    size_t len;
    cr_assert_eq(cache_get(&c, key, &got, &len, NULL), FG_OK, "the intact image must still load");
    free(got);
    /* One byte too many is as bad as one too few. */
    uint8_t *longer = malloc(size + 1);
    cr_assert_not_null(longer);
    memcpy(longer, image, size);
    longer[size] = 0;
    write_raw(path, longer, size + 1);
    expect_miss(&c, key, "an extra byte", size);
    free(longer);
    free(image);
}

Test(cache, every_bit_flip_is_a_miss) {
    fg_disk_cache c = open_cache();
    uint8_t key[32], *image;
    size_t size;
    char path[4200];
    store_sample(&c, key, &image, &size, path, sizeof path);
    for (size_t off = 0; off < size; off++) {
        for (int bit = 0; bit < 8; bit++) {
            image[off] ^= (uint8_t)(1u << bit);
            write_raw(path, image, size);
            expect_miss(&c, key, "bit flip at byte", off);
            image[off] ^= (uint8_t)(1u << bit);
        }
    }
    free(image);
}

Test(cache, entry_under_another_key_is_a_miss) {
    fg_disk_cache c = open_cache();
    uint8_t key[32], other[32], *image;
    size_t size;
    char path[4200], other_path[4200];
    store_sample(&c, key, &image, &size, path, sizeof path);
    key_of("another variant", other);
    entry_path(&c, other, other_path, sizeof other_path);
    write_raw(other_path, image, size);
    expect_miss(&c, other, "an entry copied under another key's name", 0);
    free(image);
}

Test(cache, symlinked_and_special_entries_are_misses) {
    fg_disk_cache c = open_cache();
    uint8_t key[32], *image;
    size_t size;
    char path[4200], elsewhere[300];
    store_sample(&c, key, &image, &size, path, sizeof path);
    /* A perfectly valid entry, reached through a symlink, must still be refused. */
    snprintf(elsewhere, sizeof elsewhere, "%s/real.cubin", g_root);
    write_raw(elsewhere, image, size);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(symlink(elsewhere, path), 0);
    expect_miss(&c, key, "a symlinked entry", 0);
    fg_error err;
    uint8_t *p;
    size_t n;
    fg_error_clear(&err);
    cache_get(&c, key, &p, &n, &err);
    cr_assert_not_null(strstr(err.msg, "symbolic link"), "the reason says symlink: %s", err.msg);
    /* A FIFO under an entry name must not block the reader. */
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkfifo(path, 0600), 0);
    expect_miss(&c, key, "a FIFO entry", 0);
    /* Nor a directory. */
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkdir(path, 0700), 0);
    expect_miss(&c, key, "a directory entry", 0);
    free(image);
}

/* ---------------------------------------------------------------- crashes and races */

Test(cache, writer_killed_at_random_points_never_leaves_a_bad_entry) {
    fg_disk_cache c = open_cache();
    size_t n = 4u << 20;
    uint8_t *payload = malloc(n), key[32];
    cr_assert_not_null(payload);
    fill_random(payload, n, 4242);
    key_of("killed writer", key);
    char path[4200];
    entry_path(&c, key, path, sizeof path);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    int hits = 0, misses = 0;
    for (int round = 0; round < 60; round++) {
        if (unlink(path) != 0)
            cr_assert_eq(errno, ENOENT);
        pid_t pid = fork();
        cr_assert(pid >= 0, "fork: %s", strerror(errno));
        if (pid == 0) {
            for (;;)
                if (cache_put(&c, key, "killed writer", payload, n, NULL) != FG_OK)
                    _exit(1);
        }
        usleep((useconds_t)(rand() % 80000));
        cr_assert_eq(kill(pid, SIGKILL), 0);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status), "the writer failed on its own (status %d) before it was killed", status);
        uint8_t *got;
        size_t len;
        fg_error err;
        fg_error_clear(&err);
        fg_status st = cache_get(&c, key, &got, &len, &err);
        if (st == FG_OK) {
            cr_assert_eq(len, n, "round %d: a hit with the wrong length", round);
            cr_assert_eq(memcmp(got, payload, n), 0, "round %d: a hit with the wrong content", round);
            free(got);
            hits++;
        } else {
            cr_assert_eq(st, FG_ERR_NOT_FOUND, "round %d: %s", round, err.msg);
            misses++;
        }
    }
    cr_log_info("killed writers: %d rounds left a valid entry, %d left none", hits, misses);
    /* The killed writers' temporary files are stale: cache_clear removes them with the entry. */
    fg_error err;
    fg_error_clear(&err);
    int removed = cache_clear(&c, &err);
    cr_assert(removed >= 0, "%s", err.msg);
    cr_assert_eq(count_files(c.dir, NULL), 0, "cache_clear left files behind");
    free(payload);
}

Test(cache, concurrent_writers_of_one_key) {
    fg_disk_cache c = open_cache();
    size_t n = 256u << 10;
    uint8_t *payload = malloc(n), key[32];
    cr_assert_not_null(payload);
    fill_random(payload, n, 77);
    key_of("raced", key);
    int gate[2];
    cr_assert_eq(pipe(gate), 0);
    enum { WRITERS = 8, PUTS = 10 };
    pid_t pids[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        pids[i] = fork();
        cr_assert(pids[i] >= 0, "fork: %s", strerror(errno));
        if (pids[i] == 0) {
            char b;
            close(gate[1]);
            if (read(gate[0], &b, 1) != 0) /* returns 0 when the parent closes the pipe: all start together */
                _exit(2);
            for (int j = 0; j < PUTS; j++) {
                fg_error err;
                fg_error_clear(&err);
                if (cache_put(&c, key, "raced", payload, n, &err) != FG_OK) {
                    fprintf(stderr, "writer %d: %s\n", i, err.msg);
                    _exit(1);
                }
                uint8_t *got;
                size_t len;
                if (cache_get(&c, key, &got, &len, &err) != FG_OK) {
                    fprintf(stderr, "writer %d: read back: %s\n", i, err.msg);
                    _exit(3);
                }
                if (len != n || memcmp(got, payload, n) != 0)
                    _exit(4);
                free(got);
            }
            _exit(0);
        }
    }
    close(gate[0]);
    close(gate[1]);
    for (int i = 0; i < WRITERS; i++) {
        int status;
        cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %d failed (status %d)", i, status);
    }
    cr_assert_eq(count_files(c.dir, NULL), 1, "exactly one file must remain");
    cr_assert_eq(count_files(c.dir, ".tmp-"), 0, "no temporary file may remain");
    uint8_t *got;
    size_t len;
    cr_assert_eq(cache_get(&c, key, &got, &len, NULL), FG_OK);
    cr_assert_eq(len, n);
    cr_assert_eq(memcmp(got, payload, n), 0);
    free(got);
    free(payload);
}

/* ---------------------------------------------------------------- unsafe directories */

static void expect_refused(const char *dir, const char *rule) {
    fg_disk_cache c;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = cache_open(&c, dir, &err);
    cr_assert_eq(st, FG_ERR_IO, "'%s' was accepted (%s expected)", dir, rule);
    cr_assert_not_null(strstr(err.msg, dir), "the sentence names the directory: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, rule), "the sentence names the rule '%s': %s", rule, err.msg);
    cr_assert_eq(c.dir[0], '\0', "a refused cache must not be usable");
}

Test(cache, group_or_world_writable_directory_is_refused) {
    static const mode_t bad[] = {0777, 0770, 0720, 0702};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(mkdir(g_dir, 0700), 0);
        cr_assert_eq(chmod(g_dir, bad[i]), 0);
        expect_refused(g_dir, "group or others");
        cr_assert_eq(rmdir(g_dir), 0);
    }
    /* Readable by others is fine: only writing lets someone plant code. */
    cr_assert_eq(mkdir(g_dir, 0700), 0);
    cr_assert_eq(chmod(g_dir, 0755), 0);
    fg_disk_cache c;
    cr_assert_eq(cache_open(&c, g_dir, NULL), FG_OK);
}

Test(cache, symlinked_directory_is_refused) {
    char real[300];
    snprintf(real, sizeof real, "%s/real", g_root);
    cr_assert_eq(mkdir(real, 0700), 0);
    cr_assert_eq(symlink(real, g_dir), 0);
    expect_refused(g_dir, "symbolic link");
    /* With a trailing slash too (a path ending in '/' would otherwise resolve through the link). */
    char slashed[300];
    snprintf(slashed, sizeof slashed, "%s/", g_dir);
    fg_disk_cache c;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, slashed, &err), FG_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "symbolic link"), "%s", err.msg);
}

Test(cache, non_directory_is_refused) {
    write_raw(g_dir, (const uint8_t *)"x", 1);
    expect_refused(g_dir, "not a directory");
}

Test(cache, directory_of_another_user_is_refused) {
    if (geteuid() != 0)
        cr_skip("not running as root, so this test cannot chown a directory to another user");
    cr_assert_eq(mkdir(g_dir, 0700), 0);
    cr_assert_eq(chown(g_dir, 65534, 65534), 0, "chown: %s", strerror(errno));
    expect_refused(g_dir, "owned by uid 65534");
}

Test(cache, missing_parents_are_created_private) {
    char deep[300];
    snprintf(deep, sizeof deep, "%s/a/b/c", g_root);
    fg_disk_cache c;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, deep, &err), FG_OK, "%s", err.msg);
    cr_assert_str_eq(c.dir, deep);
    const char *parts[] = {"a", "a/b", "a/b/c"};
    for (int i = 0; i < 3; i++) {
        char p[300];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", g_root, parts[i]);
        cr_assert_eq(stat(p, &st), 0);
        cr_assert_eq(st.st_mode & 0777, 0700, "%s is %o", p, st.st_mode & 0777);
    }
}

/* ---------------------------------------------------------------- location rules */

static void clear_env(void) {
    unsetenv("FLASHGEN_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
}

Test(cache, location_rules) {
    char want[400], env_dir[300], xdg[300], home[300];
    fg_disk_cache c;
    fg_error err;
    snprintf(env_dir, sizeof env_dir, "%s/from-env", g_root);
    snprintf(xdg, sizeof xdg, "%s/xdg", g_root);
    snprintf(home, sizeof home, "%s/home", g_root);
    clear_env();
    setenv("FLASHGEN_CACHE_DIR", env_dir, 1);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("HOME", home, 1);

    /* An explicit directory beats everything. */
    cr_assert_eq(cache_open(&c, g_dir, NULL), FG_OK);
    cr_assert_str_eq(c.dir, g_dir);
    /* Then $FLASHGEN_CACHE_DIR (an empty explicit directory counts as none). */
    cr_assert_eq(cache_open(&c, "", NULL), FG_OK);
    cr_assert_str_eq(c.dir, env_dir);
    cr_assert_eq(cache_open(&c, NULL, NULL), FG_OK);
    cr_assert_str_eq(c.dir, env_dir);
    /* Then $XDG_CACHE_HOME/flashgen. */
    setenv("FLASHGEN_CACHE_DIR", "", 1);
    cr_assert_eq(cache_open(&c, NULL, NULL), FG_OK);
    snprintf(want, sizeof want, "%s/flashgen", xdg);
    cr_assert_str_eq(c.dir, want);
    /* Then $HOME/.cache/flashgen; a relative $XDG_CACHE_HOME is ignored, as the XDG specification says. */
    setenv("XDG_CACHE_HOME", "relative/xdg", 1);
    cr_assert_eq(cache_open(&c, NULL, NULL), FG_OK);
    snprintf(want, sizeof want, "%s/.cache/flashgen", home);
    cr_assert_str_eq(c.dir, want);
    struct stat st;
    cr_assert_eq(stat(want, &st), 0, "the directory was created");
    /* Nothing resolvable is an error with a sentence. */
    clear_env();
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, NULL, &err), FG_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "FLASHGEN_CACHE_DIR"), "%s", err.msg);
    cr_assert_eq(c.dir[0], '\0');
    setenv("HOME", "not/absolute", 1);
    cr_assert_eq(cache_open(&c, NULL, NULL), FG_ERR_IO);
}

Test(cache, relative_directory_is_made_absolute) {
    cr_assert_eq(chdir(g_root), 0);
    fg_disk_cache c;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, "rel/", &err), FG_OK, "%s", err.msg);
    char want[300];
    snprintf(want, sizeof want, "%s/rel", g_root);
    cr_assert_str_eq(c.dir, want);
}

/* ---------------------------------------------------------------- listing and clearing */

typedef struct visit_log {
    int n;            /* callbacks */
    int verified;     /* of which verified */
    int named;        /* of which had a name */
    int ptx;          /* of which held PTX */
    char names[8][64];/* names seen, in order */
} visit_log;

static void on_visit(void *user, const char *file, const char *name, uint64_t payload_len, int verified,
                     const char *why_not, int ptx) {
    visit_log *log = user;
    cr_assert_eq(strlen(file), 70, "visited a file that is not an entry: %s", file);
    cr_assert(verified || (why_not && why_not[0]), "an unverified entry must say why");
    if (log->n < 8)
        snprintf(log->names[log->n], 64, "%s", name ? name : "(none)");
    log->n++;
    log->verified += verified;
    log->named += name != NULL;
    log->ptx += ptx;
    (void)payload_len;
}

Test(cache, visit_reports_entries_and_damage) {
    fg_disk_cache c = open_cache();
    uint8_t k1[32], k2[32], k3[32];
    key_of("one", k1);
    key_of("two", k2);
    key_of("three", k3);
    cr_assert_eq(cache_put(&c, k1, "spec-one", (const uint8_t *)"1111", 4, NULL), FG_OK);
    cr_assert_eq(cache_put(&c, k2, "spec-two", (const uint8_t *)"2222", 4, NULL), FG_OK);
    cr_assert_eq(cache_put(&c, k3, "spec-three", (const uint8_t *)"3333", 4, NULL), FG_OK);
    char path[4200], other[4200];
    entry_path(&c, k3, path, sizeof path);
    uint8_t *image;
    size_t size;
    read_whole(path, &image, &size);
    image[size - 1] ^= 1;
    write_raw(path, image, size);
    free(image);
    snprintf(other, sizeof other, "%s/README", c.dir);
    write_raw(other, (const uint8_t *)"hi", 2);
    visit_log log = {0};
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_visit(&c, on_visit, &log, &err), 3, "%s", err.msg);
    cr_assert_eq(log.n, 3);
    cr_assert_eq(log.verified, 2);
    cr_assert_eq(log.named, 3);
    cr_assert_eq(log.ptx, 0, "none of these payloads is PTX");
}

/* An entry holding PTX (what a context under FLASHGEN_EMULATE_ARCH stores) is told from a cubin. */
Test(cache, visit_tells_ptx_from_a_cubin) {
    fg_disk_cache c = open_cache();
    uint8_t k1[32], k2[32];
    key_of("as-cubin", k1);
    key_of("as-ptx", k2);
    const char elf[] = "\x7f" "ELF\x02\x01\x01";
    const char ptx[] = "//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_80\n";
    cr_assert_eq(cache_put(&c, k1, "spec", (const uint8_t *)elf, sizeof elf, NULL), FG_OK);
    cr_assert_eq(cache_put(&c, k2, "spec", (const uint8_t *)ptx, sizeof ptx, NULL), FG_OK);
    visit_log log = {0};
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_visit(&c, on_visit, &log, &err), 2, "%s", err.msg);
    cr_assert_eq(log.verified, 2);
    cr_assert_eq(log.ptx, 1);
}

Test(cache, clear_removes_entries_and_stale_temps_only) {
    fg_disk_cache c = open_cache();
    for (int i = 0; i < 3; i++) {
        uint8_t k[32];
        char text[16];
        snprintf(text, sizeof text, "v%d", i);
        key_of(text, k);
        cr_assert_eq(cache_put(&c, k, text, (const uint8_t *)"data", 4, NULL), FG_OK);
    }
    /* A temporary file of a dead writer (a child that has exited), and one of a live writer (us). */
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0)
        _exit(0);
    cr_assert_eq(waitpid(child, NULL, 0), child);
    char p[4400];
    snprintf(p, sizeof p, "%s/.tmp-%ld-1-0-deadbeef.cubin", c.dir, (long)child);
    write_raw(p, (const uint8_t *)"partial", 7);
    snprintf(p, sizeof p, "%s/.tmp-%ld-1-0-live.cubin", c.dir, (long)getpid());
    write_raw(p, (const uint8_t *)"partial", 7);
    /* Files flashgen did not write stay. */
    const char *keep[] = {"notes.txt", "abc.cubin", ".hidden",
                          "0123456789abcdef0123456789abcdef0123456789abcdef0123456789ABCDEF.cubin"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", c.dir, keep[i]);
        write_raw(p, (const uint8_t *)"keep", 4);
    }
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_clear(&c, &err), 4, "3 entries and 1 stale temporary file: %s", err.msg);
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", c.dir, keep[i]);
        cr_assert_eq(access(p, F_OK), 0, "%s was removed", keep[i]);
    }
    cr_assert_eq(count_files(c.dir, ".tmp-"), 1, "the live writer's temporary file stays");
    cr_assert_eq(count_files(c.dir, NULL), 5);
    uint8_t k[32], *got;
    size_t len;
    key_of("v0", k);
    expect_miss(&c, k, "a cleared entry", 0);
    (void)got;
    (void)len;
}

/* ---------------------------------------------------------------- whole-file helpers */

Test(cache, atomic_write_and_read_file) {
    char path[300];
    snprintf(path, sizeof path, "%s/out.bin", g_root);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(fg_write_file_atomic(path, "first version", 13, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(fg_write_file_atomic(path, "second", 6, &err), FG_OK, "%s", err.msg);
    uint8_t *data;
    size_t len;
    read_whole(path, &data, &len);
    cr_assert_eq(len, 6);
    cr_assert_str_eq((char *)data, "second", "the contents are followed by a NUL");
    free(data);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    cr_assert_eq(count_files(g_root, NULL), 1, "only the file itself remains in its directory");

    /* A bare file name writes into the working directory. */
    cr_assert_eq(chdir(g_root), 0);
    cr_assert_eq(fg_write_file_atomic("bare.txt", "x", 1, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(access("bare.txt", F_OK), 0);

    /* Failures name the path and leave nothing behind. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no/such/dir/file", g_root);
    fg_error_clear(&err);
    cr_assert_eq(fg_write_file_atomic(missing, "x", 1, &err), FG_ERR_IO);
    cr_assert_not_null(strstr(err.msg, missing), "%s", err.msg);
    snprintf(missing, sizeof missing, "%s/absent", g_root);
    fg_error_clear(&err);
    cr_assert_eq(fg_read_file(missing, &data, &len, &err), FG_ERR_IO);
    cr_assert_null(data);
    cr_assert_not_null(strstr(err.msg, missing), "%s", err.msg);
    /* A directory is refused before anything is written; no temporary file is left. */
    char sub[300];
    snprintf(sub, sizeof sub, "%s/adir", g_root);
    cr_assert_eq(mkdir(sub, 0700), 0);
    fg_error_clear(&err);
    cr_assert_eq(fg_write_file_atomic(sub, "x", 1, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "it is a directory"), "%s", err.msg);
    cr_assert_eq(count_files(g_root, ".tmp-"), 0, "a failed write left its temporary file");
}
