/* test_cache_guard.c: the disk cache and the atomic writer against what other processes and users leave or
 * do (core/files.c, runtime/cache.c): output paths that are links or FIFOs, temporary files of killed writers,
 * the size bound and its least-recently-used eviction, a cache directory swapped after it was opened,
 * parents others can write, bad knob values. Each test works in its own scratch directory. */
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <time.h>
#include "core/knobs.h"
#include "tests/cache_harness.h"

TestSuite(cache, .init = scratch_init, .fini = scratch_fini);

/* Issue 37 item 2: an output path naming a symbolic link or a FIFO (a stand-in for /dev/null and /dev/stdout,
 * made in the test's own directory) is refused and left as it was; a replaced regular file keeps its mode; a
 * new file's mode is the one asked less the umask. */
Test(cache, output_paths_refuse_links_and_devices_and_keep_modes) {
    char target[300], link[300], fifo[300], kept[300], fresh[300];
    snprintf(target, sizeof target, "%s/target", g_root);
    snprintf(link, sizeof link, "%s/link", g_root);
    snprintf(fifo, sizeof fifo, "%s/fifo", g_root);
    snprintf(kept, sizeof kept, "%s/kept", g_root);
    snprintf(fresh, sizeof fresh, "%s/fresh", g_root);
    fg_error err;
    cr_assert_eq(fg_write_file_atomic(target, "target", 6, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(symlink(target, link), 0);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    fg_error_clear(&err);
    cr_assert_eq(fg_write_file_atomic_mode(link, "x", 1, 0644, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "it is a symbolic link") && strstr(err.msg, link), "%s", err.msg);
    fg_error_clear(&err);
    cr_assert_eq(fg_write_file_atomic(fifo, "x", 1, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "FIFO"), "%s", err.msg);
    struct stat st;
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the link was replaced");
    cr_assert_eq(lstat(fifo, &st), 0);
    cr_assert(S_ISFIFO(st.st_mode), "the FIFO was replaced");
    uint8_t *data;
    size_t len;
    read_whole(target, &data, &len);
    cr_assert(len == 6 && memcmp(data, "target", 6) == 0, "the link's target changed");
    free(data);
    /* an existing 0640 file keeps 0640 whatever the mode asked */
    cr_assert_eq(fg_write_file_atomic(kept, "a", 1, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(chmod(kept, 0640), 0);
    cr_assert_eq(fg_write_file_atomic_mode(kept, "b", 1, 0644, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(stat(kept, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0640, "mode %o", st.st_mode & 07777);
    /* a new file: 0644 less the umask */
    const mode_t old = umask(027);
    cr_assert_eq(fg_write_file_atomic_mode(fresh, "c", 1, 0644, &err), FG_OK, "%s", err.msg);
    umask(old);
    cr_assert_eq(stat(fresh, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0640, "mode %o", st.st_mode & 07777);
    cr_assert_eq(count_files(g_root, ".tmp-"), 0, "a refused write left a temporary file");
}

/* A pid that no process has: a child that has exited and been reaped. */
static pid_t dead_pid(void) {
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) _exit(0);
    int status;
    cr_assert_eq(waitpid(p, &status, 0), p);
    return p;
}

/* Issue 37 item 5: the temporary files killed writers leave are counted (cache_usage: `flashgen cache ls`,
 * `verify`, `info`) and removed when a context opens the cache and when the same output is written again;
 * a live writer's temporary file stays. */
Test(cache, killed_writers_temporary_files_are_counted_and_reaped) {
    fg_disk_cache c = open_cache();
    char dead[4200], live[4200], out[300], dead_out[512];
    const pid_t gone = dead_pid();
    snprintf(dead, sizeof dead, "%s/.tmp-%d-1-0-0123.cubin", c.dir, (int)gone);
    snprintf(live, sizeof live, "%s/.tmp-%d-1-0-4567.cubin", c.dir, (int)getpid());
    write_raw(dead, (const uint8_t *)"half an entry", 13);
    write_raw(live, (const uint8_t *)"being written", 13);
    fg_cache_usage u;
    fg_error err;
    cr_assert_eq(cache_usage(&c, &u, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(u.tmp_files, 2);
    cr_assert_eq(u.tmp_bytes, 26);
    c = open_cache(); /* a context opening the cache */
    cr_assert_eq(access(dead, F_OK), -1, "the dead writer's temporary file is still there");
    cr_assert_eq(access(live, F_OK), 0, "a live writer's temporary file was removed");
    cr_assert_eq(cache_usage(&c, &u, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(u.tmp_files, 1);
    unlink(live);
    /* beside any output: a killed `flashgen bundle -o out.fgb` left one; the next write of out.fgb removes it */
    snprintf(out, sizeof out, "%s/out.fgb", g_root);
    snprintf(dead_out, sizeof dead_out, "%s/.tmp-%d-7-3-out.fgb", g_root, (int)gone);
    write_raw(dead_out, (const uint8_t *)"partial bundle", 14);
    cr_assert_eq(fg_write_file_atomic(out, "bundle", 6, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(access(dead_out, F_OK), -1, "the killed bundle write's temporary file is still there");
}

/* Issue 37 item 5: the cache's entries are bounded; past the bound a put evicts the least recently used, and a
 * hit makes an entry recent. `cache_prune` applies any bound at once. */
Test(cache, bound_evicts_least_recently_used_entries) {
    fg_disk_cache c = open_cache();
    uint8_t payload[1000];
    memset(payload, 7, sizeof payload);
    uint8_t keys[6][32];
    char path[6][4200];
    fg_error err;
    const time_t now = time(NULL);
    for (int i = 0; i < 5; i++) { /* entries used 10, 9, ..., 6 hours ago: entry 0 the least recently */
        char text[16];
        snprintf(text, sizeof text, "entry %d", i);
        key_of(text, keys[i]);
        cr_assert_eq(cache_put(&c, keys[i], "k", payload, sizeof payload, &err), FG_OK, "%s", err.msg);
        entry_path(&c, keys[i], path[i], sizeof path[i]);
        struct timespec t[2] = {{now - (10 - i) * 3600, 0}, {now - (10 - i) * 3600, 0}};
        cr_assert_eq(utimensat(AT_FDCWD, path[i], t, 0), 0);
    }
    uint8_t *got;
    size_t len;
    cr_assert_eq(cache_get(&c, keys[0], &got, &len, &err), FG_OK, "%s", err.msg); /* entry 0 becomes recent */
    free(got);
    struct stat st;
    cr_assert_eq(stat(path[0], &st), 0);
    cr_assert_geq(st.st_mtime, now - 60, "a hit did not mark the entry used");
    struct timespec two_hours[2] = {{now - 7200, 0}, {now - 7200, 0}}; /* still more recent than entries 1-4 */
    cr_assert_eq(utimensat(AT_FDCWD, path[0], two_hours, 0), 0);
    fg_cache_usage u;
    cr_assert_eq(cache_usage(&c, &u, &err), FG_OK, "%s", err.msg);
    const unsigned long long one = u.entry_bytes / 5;
    c.max_bytes = 4 * one; /* room for four entries */
    key_of("entry 5", keys[5]);
    entry_path(&c, keys[5], path[5], sizeof path[5]);
    cr_assert_eq(cache_put(&c, keys[5], "k", payload, sizeof payload, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(access(path[1], F_OK), -1, "entry 1, the least recently used, was kept");
    cr_assert_eq(access(path[2], F_OK), -1, "entry 2 was kept past the bound");
    cr_assert_eq(access(path[0], F_OK), 0, "entry 0, used by the hit, was evicted");
    cr_assert_eq(cache_usage(&c, &u, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(u.entries, 4);
    int removed;
    unsigned long long freed;
    cr_assert_eq(cache_prune(&c, one, &removed, &freed, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(removed, 3);
    cr_assert_eq(freed, 3 * one);
    cr_assert_eq(cache_usage(&c, &u, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(u.entries, 1);
    cr_assert_eq(access(path[5], F_OK), 0, "the newest entry was evicted");
}

/* Issue 37 item 4: after cache_open, a directory swapped in under the cache's path (by someone who can write
 * its parent) holding a correctly checksummed entry is never loaded nor written: every access checks it is
 * still the directory that was opened and checked. */
Test(cache, directory_swapped_after_open_is_not_trusted) {
    fg_disk_cache c = open_cache();
    uint8_t key[32];
    key_of("swap", key);
    fg_error err;
    cr_assert_eq(cache_put(&c, key, "genuine", (const uint8_t *)"genuine code", 12, &err), FG_OK, "%s", err.msg);
    char moved[300];
    snprintf(moved, sizeof moved, "%s.moved", g_dir);
    cr_assert_eq(rename(g_dir, moved), 0);
    cr_assert_eq(mkdir(g_dir, 0700), 0);
    fg_disk_cache planted = open_cache(); /* the attacker's directory, entries checksummed as the victim's */
    cr_assert_eq(cache_put(&planted, key, "genuine", (const uint8_t *)"planted code", 12, &err), FG_OK, "%s", err.msg);
    uint8_t *got = NULL;
    size_t len;
    fg_error_clear(&err);
    cr_assert_eq(cache_get(&c, key, &got, &len, &err), FG_ERR_NOT_FOUND, "the swapped-in directory's entry loaded");
    cr_assert(strstr(err.msg, "no longer the one checked"), "%s", err.msg);
    fg_error_clear(&err);
    cr_assert_eq(cache_put(&c, key, "x", (const uint8_t *)"x", 1, &err), FG_ERR_IO, "a write went to the swapped-in "
                 "directory");
    cr_assert_eq(cache_get(&planted, key, &got, &len, &err), FG_OK, "%s", err.msg);
    cr_assert(len == 12 && memcmp(got, "planted code", 12) == 0, "the planted entry was changed");
    free(got);
}

/* Issue 37 item 4: a cache directory under a parent that others can write without the sticky bit is refused
 * (they could swap it); with the sticky bit (as /tmp) it is accepted. */
Test(cache, parent_writable_by_others_without_sticky_bit_is_refused) {
    char parent[300], dir[400];
    snprintf(parent, sizeof parent, "%s/open", g_root);
    snprintf(dir, sizeof dir, "%s/cache", parent);
    cr_assert_eq(mkdir(parent, 0700), 0);
    cr_assert_eq(chmod(parent, 0777), 0);
    fg_disk_cache c;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, dir, &err), FG_ERR_IO);
    cr_assert(strstr(err.msg, "without the sticky bit") && strstr(err.msg, parent), "%s", err.msg);
    cr_assert_eq(chmod(parent, 01777), 0);
    cr_assert_eq(cache_open(&c, dir, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(chmod(parent, 0700), 0);
}

/* Issue 37 item 4: a symbolic link among the cache directory's parents is followed only where no other user could
 * change the walk: a link in a directory writable by others without the sticky bit (which its realpath never shows)
 * is refused, naming that directory; one in a private directory is followed; as root, a link another user owns is
 * refused too (in a sticky directory its owner can still point it elsewhere). */
Test(cache, symlinked_parent_component_is_checked) {
    char open_dir[300], safe[300], link[400], dir[500];
    snprintf(open_dir, sizeof open_dir, "%s/open", g_root);
    snprintf(safe, sizeof safe, "%s/safe", g_root);
    snprintf(link, sizeof link, "%s/link", open_dir);
    snprintf(dir, sizeof dir, "%s/cache", link);
    cr_assert_eq(mkdir(open_dir, 0700), 0);
    cr_assert_eq(mkdir(safe, 0700), 0);
    cr_assert_eq(symlink(safe, link), 0);
    cr_assert_eq(chmod(open_dir, 0777), 0);
    fg_disk_cache c;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, dir, &err), FG_ERR_IO, "a link in a directory anyone can write was followed");
    cr_assert(strstr(err.msg, "without the sticky bit") && strstr(err.msg, open_dir), "%s", err.msg);
    cr_assert_eq(chmod(open_dir, 0700), 0);
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, dir, &err), FG_OK, "a link in a private directory: %s", err.msg);
    if (geteuid() != 0) return; /* only root can give a link to another user */
    cr_assert_eq(chmod(open_dir, 01777), 0);
    cr_assert_eq(lchown(link, 65534, 65534), 0, "%s", strerror(errno));
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, dir, &err), FG_ERR_IO, "another user's link was followed");
    cr_assert(strstr(err.msg, "symbolic link") && strstr(err.msg, "uid 65534") && strstr(err.msg, link), "%s", err.msg);
    cr_assert_eq(chmod(open_dir, 0700), 0);
}

/* Issue 37's knobs: a bad FLASHGEN_CACHE_MAX_MB is refused with a sentence naming it; a switch set to something
 * other than 0 or 1 is named (a context logs it as a warning) instead of silently reading as its default. */
Test(cache, bad_knob_values_are_named) {
    fg_disk_cache c;
    fg_error err;
    setenv("FLASHGEN_CACHE_MAX_MB", "lots", 1);
    fg_error_clear(&err);
    cr_assert_eq(cache_open(&c, g_dir, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "FLASHGEN_CACHE_MAX_MB is 'lots'"), "%s", err.msg);
    setenv("FLASHGEN_CACHE_MAX_MB", "16", 1);
    cr_assert_eq(cache_open(&c, g_dir, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(c.max_bytes, 16ull << 20);
    unsetenv("FLASHGEN_CACHE_MAX_MB");
    char msg[256];
    cr_assert_eq(knob_bad_switch(msg, sizeof msg), 0, "no switch is set here: %s", msg);
    setenv("FLASHGEN_WGMMA", "false", 1);
    cr_assert_eq(knob_bad_switch(msg, sizeof msg), 1);
    cr_assert(strstr(msg, "FLASHGEN_WGMMA=false is not 0 or 1") && strstr(msg, "default (1)"), "%s", msg);
    setenv("FLASHGEN_WGMMA", "0", 1);
    cr_assert_eq(knob_bad_switch(msg, sizeof msg), 0);
    unsetenv("FLASHGEN_WGMMA");
}
