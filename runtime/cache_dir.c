/* cache_dir.c: where the on-disk cache lives, and whether it may be trusted (the rules in cache.h): the directory's
 * resolution from the call and the environment, its creation, the checks of it and of every directory and link its
 * path goes through, and its reopening for each access, which refuses a directory swapped in under the path. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include "runtime/cache.h"
#include "core/files.h"
#include "core/knobs.h"

/* Copies a path into out (PATH_MAX-sized, the size of fg_disk_cache.dir) with trailing slashes removed;
 * a relative path is made absolute against the working directory, so the cache keeps working after a
 * chdir. Returns FG_OK or FG_ERR_IO naming `what` (where the path came from). */
static fg_status absolute_dir(const char *path, const char *suffix, const char *what, char out[4096],
                              fg_error *err) {
    char cwd[4096];
    const char *prefix = "";
    const char *sep = "";
    if (path[0] != '/') {
        if (!getcwd(cwd, sizeof cwd))
            return fg_fail(err, FG_ERR_IO, "cannot make the cache directory '%s' (%s) absolute: getcwd failed: %s.",
                           path, what, strerror(errno));
        prefix = cwd;
        sep = strcmp(cwd, "/") == 0 ? "" : "/";
    }
    int n = snprintf(out, 4096, "%s%s%s%s", prefix, sep, path, suffix);
    if (n < 0 || n >= 4096)
        return fg_fail(err, FG_ERR_IO, "the cache directory '%s%s' (%s) is longer than 4095 bytes.", path, suffix,
                       what);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
    return FG_OK;
}

/* Creates `path` and its missing parents, each with mode 0700 (mkdir -p). Existing directories are left
 * as they are; whether the last one is acceptable is check_dir's business. FG_ERR_IO naming the
 * component that could not be created. */
static fg_status make_dirs(const char *path, fg_error *err) {
    char buf[4096];
    size_t n = strlen(path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return fg_fail(err, FG_ERR_IO, "cannot create the cache directory '%s' (at '%s'): %s.", path, buf,
                           strerror(errno));
        buf[i] = c;
    }
    return FG_OK;
}

/* Refuses a cache directory another user could tamper with: a symlink (lstat, so the link itself is
 * judged), not a directory, owned by another uid, writable by group or others, or not fully
 * accessible to its owner. FG_ERR_IO with a sentence naming the directory and the rule. */
static fg_status check_dir(const char *dir, fg_error *err) {
    struct stat st;
    if (lstat(dir, &st) != 0)
        return fg_fail(err, FG_ERR_IO, "cannot stat the cache directory '%s': %s.", dir, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return fg_fail(err, FG_ERR_IO,
                       "refusing the cache directory '%s': it is a symbolic link, and the cache directory must "
                       "be a real directory so that no one can redirect it.",
                       dir);
    if (!S_ISDIR(st.st_mode))
        return fg_fail(err, FG_ERR_IO, "refusing the cache directory '%s': it exists but is not a directory.", dir);
    if (st.st_uid != geteuid())
        return fg_fail(err, FG_ERR_IO,
                       "refusing the cache directory '%s': it is owned by uid %ld, not by this user (uid %ld), "
                       "and compiled code is only loaded from a directory the user owns.",
                       dir, (long)st.st_uid, (long)geteuid());
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return fg_fail(err, FG_ERR_IO,
                       "refusing the cache directory '%s': its mode %04o lets group or others write to it; "
                       "it must be private (chmod 700).",
                       dir, (unsigned)(st.st_mode & 07777));
    if ((st.st_mode & S_IRWXU) != S_IRWXU)
        return fg_fail(err, FG_ERR_IO,
                       "refusing the cache directory '%s': its mode %04o does not give its owner read, write "
                       "and search permission (chmod 700).",
                       dir, (unsigned)(st.st_mode & 07777));
    return FG_OK;
}

/* Refuses a lookup in directory `cur` (a real path) that another user could change: `cur` must be owned by root
 * or this user and not be writable by group or others unless it has the sticky bit (as /tmp does, where others
 * can add but not rename or remove what this user owns). dir names the cache directory in messages. */
static fg_status check_lookup_dir(const char *dir, const char *cur, fg_error *err) {
    struct stat st;
    if (stat(cur, &st) != 0)
        return fg_fail(err, FG_ERR_IO, "cannot stat '%s', a parent of the cache directory: %s.", cur, strerror(errno));
    if (st.st_uid != 0 && st.st_uid != geteuid())
        return fg_fail(err, FG_ERR_IO, "refusing the cache directory '%s': its parent '%s' is owned by uid %ld, who "
                       "could replace the cache directory with one of their own.", dir, cur, (long)st.st_uid);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
        return fg_fail(err, FG_ERR_IO, "refusing the cache directory '%s': its parent '%s' (mode %04o) is "
                       "writable by group or others without the sticky bit, so another user could replace "
                       "the cache directory.", dir, cur, (unsigned)(st.st_mode & 07777));
    return FG_OK;
}

/* Refuses a cache directory whose path passes through anything another user could change (the entry names are
 * public, so whoever can swap a component can plant checksummed code). The absolute path is walked as the kernel
 * resolves it, one component at a time: every directory a name is looked up in passes check_lookup_dir, and every
 * symbolic link followed on the way must be owned by root or this user (its owner can point it elsewhere, in a
 * sticky directory too). A link's own directory is checked even where its target's real path avoids it. The
 * last component itself is check_dir's. At most 40 links are followed (the kernel's bound). */
static fg_status check_parents(const char *dir, fg_error *err) {
    char cur[PATH_MAX] = "/", rest[PATH_MAX], next[PATH_MAX], target[PATH_MAX];
    if (snprintf(rest, sizeof rest, "%s", dir) >= (int)sizeof rest)
        return fg_fail(err, FG_ERR_IO, "the cache directory '%s' is longer than %d bytes.", dir, PATH_MAX - 1);
    int links = 0;
    for (char *p = rest;;) {
        while (*p == '/') p++;
        if (!*p) return FG_OK;
        char *name = p;
        while (*p && *p != '/') p++;
        const int last = !*p;
        if (*p) *p++ = '\0';
        if (last) return check_lookup_dir(dir, cur, err); /* the directory holding the cache directory */
        if (strcmp(name, ".") == 0) continue;
        if (strcmp(name, "..") == 0) { /* cur is a real path: its parent is its text up to the last '/' */
            char *slash = strrchr(cur, '/');
            slash[slash == cur] = '\0';
            continue;
        }
        fg_status st = check_lookup_dir(dir, cur, err);
        if (st != FG_OK) return st;
        if (snprintf(next, sizeof next, "%s%s%s", cur, strcmp(cur, "/") == 0 ? "" : "/", name) >= (int)sizeof next)
            return fg_fail(err, FG_ERR_IO, "the cache directory '%s' resolves to more than %d bytes.", dir, PATH_MAX - 1);
        struct stat ls;
        if (lstat(next, &ls) != 0)
            return fg_fail(err, FG_ERR_IO, "cannot stat '%s', a parent of the cache directory: %s.", next, strerror(errno));
        if (!S_ISLNK(ls.st_mode)) {
            memcpy(cur, next, strlen(next) + 1);
            continue;
        }
        if (ls.st_uid != 0 && ls.st_uid != geteuid())
            return fg_fail(err, FG_ERR_IO, "refusing the cache directory '%s': its path goes through the symbolic link "
                           "'%s', owned by uid %ld, who could point it at a directory of their own.", dir, next,
                           (long)ls.st_uid);
        const ssize_t n = readlink(next, target, sizeof target - 1);
        if (n < 0 || ++links > 40)
            return fg_fail(err, FG_ERR_IO, "cannot resolve the cache directory '%s' at '%s': %s.", dir, next,
                           n < 0 ? strerror(errno) : "more than 40 symbolic links");
        target[n] = '\0';
        /* the walk goes on with the link's text in place of its name, from / when it is absolute */
        if (snprintf(next, sizeof next, "%s/%s", target, p) >= (int)sizeof next)
            return fg_fail(err, FG_ERR_IO, "the cache directory '%s' resolves to more than %d bytes.", dir, PATH_MAX - 1);
        memcpy(rest, next, strlen(next) + 1);
        p = rest;
        if (target[0] == '/') strcpy(cur, "/");
    }
}

/* Contract in cache.h. */
int cache_dir_fd(const fg_disk_cache *c, char *why, size_t whylen) {
    int fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(why, whylen, "the cache directory cannot be opened: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (unsigned long long)st.st_dev != c->dev || (unsigned long long)st.st_ino != c->ino ||
        st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        close(fd);
        snprintf(why, whylen, "the cache directory is no longer the one checked when the cache was opened "
                 "(replaced, or its owner or mode changed)");
        return -1;
    }
    return fd;
}

/* Resolves, creates and checks the cache directory (rules in cache.h); an empty string counts as unset,
 * and relative $XDG_CACHE_HOME or $HOME values are ignored (the XDG specification says so, and a relative
 * home would scatter caches by working directory). On failure cache->dir is empty. */
fg_status cache_open(fg_disk_cache *cache, const char *dir, fg_error *err) {
    cache->dir[0] = '\0';
    const char *env;
    fg_status st;
    if (dir && dir[0])
        st = absolute_dir(dir, "", "given explicitly", cache->dir, err);
    else if ((env = knob_value(FG_KNOB_CACHE_DIR)))
        st = absolute_dir(env, "", "from $FLASHGEN_CACHE_DIR", cache->dir, err);
    else if ((env = getenv("XDG_CACHE_HOME")) && env[0] == '/')
        st = absolute_dir(env, "/flashgen", "from $XDG_CACHE_HOME", cache->dir, err);
    else if ((env = getenv("HOME")) && env[0] == '/')
        st = absolute_dir(env, "/.cache/flashgen", "from $HOME", cache->dir, err);
    else
        return fg_fail(err, FG_ERR_IO,
                       "no cache directory: none was given and neither $FLASHGEN_CACHE_DIR, an absolute "
                       "$XDG_CACHE_HOME nor an absolute $HOME is set.");
    if (st == FG_OK)
        st = make_dirs(cache->dir, err);
    if (st == FG_OK)
        st = check_dir(cache->dir, err);
    if (st == FG_OK)
        st = check_parents(cache->dir, err);
    struct stat pin;
    if (st == FG_OK && lstat(cache->dir, &pin) != 0)
        st = fg_fail(err, FG_ERR_IO, "cannot stat the cache directory '%s': %s.", cache->dir, strerror(errno));
    if (st != FG_OK) {
        cache->dir[0] = '\0';
        return st;
    }
    cache->dev = (unsigned long long)pin.st_dev;
    cache->ino = (unsigned long long)pin.st_ino;
    cache->max_bytes = (unsigned long long)FG_CACHE_DEFAULT_MAX_MB << 20;
    const char *mb = knob_value(FG_KNOB_CACHE_MAX_MB);
    if (mb) {
        char *end;
        errno = 0;
        const unsigned long long v = strtoull(mb, &end, 10);
        if (errno || *end || mb[0] == '-' || v > (1ull << 40))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "FLASHGEN_CACHE_MAX_MB is '%s'; it must be a number of MiB "
                           "from 0 (no bound) to 2^40", mb);
        cache->max_bytes = v << 20;
    }
    char why[512];
    const int dfd = cache_dir_fd(cache, why, sizeof why);
    if (dfd >= 0) {
        fg_reap_tmp_files_at(dfd, NULL, NULL);
        close(dfd);
    }
    return FG_OK;
}
