/* files.c: whole-file reads and atomic whole-file writes, the two ways flashgen touches files.
 * Every module that writes a file (the cache, bundles, the tuning database, the CLI's -o) goes through
 * fg_write_file_atomic, so no reader ever sees a half-written file. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/types.h>
#include <unistd.h>
#include "core/files.h"
#include "core/alloc.h"

int fg_tmp_is_stale(const char *name, const struct stat *st) {
    if (strncmp(name, FG_TMP_PREFIX, sizeof FG_TMP_PREFIX - 1) != 0) return 0;
    const char *p = name + sizeof FG_TMP_PREFIX - 1;
    char *end;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (end == p || *end != '-' || errno != 0 || pid <= 0 || pid > INT_MAX) return 0;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 1;
    return time(NULL) - st->st_mtime > FG_TMP_STALE_SECONDS;
}

/* The base name a temporary file was written for: the part after FG_TMP_PREFIX<pid>-<tid>-<n>-, or NULL. */
static const char *tmp_base(const char *name) {
    const char *p = name + sizeof FG_TMP_PREFIX - 1;
    for (int dashes = 0; *p && dashes < 3; p++)
        if (*p == '-') dashes++;
    return *p ? p : NULL;
}

int fg_reap_tmp_files_at(int dirfd_in, const char *base, unsigned long long *bytes) {
    /* a descriptor of its own (a dup would share the caller's directory position) */
    int fd = openat(dirfd_in, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return 0;
    }
    int dfd = dirfd(d), removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, FG_TMP_PREFIX, sizeof FG_TMP_PREFIX - 1) != 0) continue;
        if (base) {
            const char *b = tmp_base(e->d_name);
            if (!b || strncmp(b, base, 128) != 0) continue; /* temporary names keep 128 bytes of the base */
        }
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            !fg_tmp_is_stale(e->d_name, &st))
            continue;
        if (unlinkat(dfd, e->d_name, 0) == 0) {
            removed++;
            if (bytes) *bytes += (unsigned long long)st.st_size;
        }
    }
    closedir(d);
    return removed;
}

/* Numbers the temporary files of this process, so two threads never pick the same name. */
static atomic_ulong tmp_counter;

/* Writes all n bytes to fd, retrying short writes and EINTR. Returns 0, or -1 with errno set. */
static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes from fd. Returns 0, or -1 with errno set (EIO standing in for an early end of
 * file, which means the file shrank under us). */
int file_read_exact(int fd, uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = EIO;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Writes `len` bytes to `path` so that the path names either its old file or the complete new one, never
 * a partial file: temporary file in the destination's directory (O_EXCL, 0600, a name unique per
 * process, thread and call), write, fsync, rename, fsync of the directory. The temporary file is removed
 * on every failure. FG_ERR_INVALID_ARGUMENT for an unusable path, FG_ERR_IO naming the file and the
 * failing step otherwise. */
fg_status fg_write_file_atomic(const char *path, const void *data, size_t len, fg_error *err) {
    return fg_write_file_atomic_mode(path, data, len, 0600, err);
}

/* The process's umask, read without changing it (umask(2) can only be read by setting it, which races other
 * threads' file creations): the Umask line of /proc/self/status, else the common default 022. */
static mode_t current_umask(void) {
    FILE *f = fopen("/proc/self/status", "re");
    unsigned m = 022;
    if (f) {
        char line[128];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "Umask: %o", &m) == 1) break;
        fclose(f);
    }
    return (mode_t)(m & 0777);
}

/* What an atomic write may replace: nothing, or a regular file (whose permission bits the new file keeps,
 * in *keep; -1 when there is none). Anything else is refused: renaming over a symbolic link, a device, a
 * FIFO or a socket would replace that node with a regular file (`-o /dev/null` as root destroyed the
 * device; `-o /dev/stdout` replaced the link and the pipe got nothing). `shown` names the path in messages. */
static fg_status check_replaceable(int dfd, const char *base, const char *shown, int *keep, fg_error *err) {
    struct stat st;
    *keep = -1;
    if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? FG_OK
                               : fg_fail(err, FG_ERR_IO, "cannot write '%s': cannot stat it: %s.", shown, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        *keep = (int)(st.st_mode & 07777);
        return FG_OK;
    }
    const char *what = S_ISLNK(st.st_mode)    ? "a symbolic link"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cannot write '%s': it is %s; flashgen writes regular files only "
                   "(a complete file renamed over the path), so it must name a regular file or nothing.", shown, what);
}

fg_status fg_write_file_atomic_at(int dfd, const char *dir_shown, const char *base, const void *data, size_t len,
                                  unsigned mode, fg_error *err) {
    char shown[PATH_MAX + 256];
    snprintf(shown, sizeof shown, "%s%s%s", dir_shown, strcmp(dir_shown, "/") == 0 ? "" : "/", base);
    if (!base[0] || strchr(base, '/'))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cannot write '%s': the file name is empty or has a '/'.", shown);
    if (!data && len > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "fg_write_file_atomic: data is NULL but len is %zu.", len);
    int keep;
    fg_status cs = check_replaceable(dfd, base, shown, &keep, err);
    if (cs != FG_OK) return cs;
    const mode_t final_mode = keep >= 0 ? (mode_t)keep : (mode_t)(mode & 07777) & ~current_umask();
    /* Temporary files that killed writes of this same file left are removed first (their writers are gone). */
    fg_reap_tmp_files_at(dfd, base, NULL);
    /* The base name is cut to 128 bytes so the temporary name stays under NAME_MAX (255). */
    char tmp[256];
    unsigned long n = atomic_fetch_add(&tmp_counter, 1);
    snprintf(tmp, sizeof tmp, "%s%ld-%ld-%lu-%.128s", FG_TMP_PREFIX, (long)getpid(), (long)syscall(SYS_gettid), n, base);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return fg_fail(err, FG_ERR_IO, "cannot create temporary file '%s/%s' to write '%s': %s.", dir_shown, tmp, shown,
                       strerror(errno));
    const char *step = NULL;
    if (fchmod(fd, final_mode) != 0)
        step = "fchmod";
    else if (write_all(fd, data, len) != 0)
        step = "write";
    else if (fsync(fd) != 0)
        step = "fsync";
    int saved = errno;
    if (close(fd) != 0 && !step) {
        step = "close";
        saved = errno;
    }
    if (!step && renameat(dfd, tmp, dfd, base) != 0) {
        step = "rename";
        saved = errno;
    }
    if (step) {
        unlinkat(dfd, tmp, 0); /* best effort: the failure being reported matters more than this one */
        return fg_fail(err, FG_ERR_IO, "cannot write '%s' (%s of temporary file '%s' failed: %s).", shown, step, tmp,
                       strerror(saved));
    }
    /* The rename is durable only once the directory is flushed. File systems that cannot fsync a
     * directory say EINVAL; that is not a failure of this write. */
    if (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EBADF)
        return fg_fail(err, FG_ERR_IO, "wrote '%s' but fsync of its directory '%s' failed: %s.", shown, dir_shown,
                       strerror(errno));
    return FG_OK;
}

/* fg_write_file_atomic with the permission bits of a new file: `mode` less the process's umask. A file the
 * write replaces keeps its own bits. They are set on the temporary file (created 0600) before any byte is
 * written, so no reader sees it before it is complete. The directory is opened once and everything
 * happens relative to it (fg_write_file_atomic_at). */
fg_status fg_write_file_atomic_mode(const char *path, const void *data, size_t len, unsigned mode, fg_error *err) {
    if (!path || !path[0])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "fg_write_file_atomic: the path is empty.");
    size_t plen = strlen(path);
    if (path[plen - 1] == '/')
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cannot write '%s': the path names a directory.", path);
    if (plen >= PATH_MAX)
        return fg_fail(err, FG_ERR_IO, "cannot write '%s': the path is longer than %d bytes.", path, PATH_MAX - 1);
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *base;
    if (!slash) {
        strcpy(dir, ".");
        base = path;
    } else if (slash == path) {
        strcpy(dir, "/");
        base = path + 1;
    } else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        base = slash + 1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return fg_fail(err, FG_ERR_IO, "cannot write '%s': cannot open its directory '%s': %s.", path, dir,
                       strerror(errno));
    fg_status st = fg_write_file_atomic_at(dfd, dir, base, data, len, mode, err);
    if (st == FG_OK && close(dfd) != 0)
        return fg_fail(err, FG_ERR_IO, "wrote '%s' but closing its directory '%s' failed: %s.", path, dir,
                       strerror(errno));
    if (st != FG_OK) close(dfd);
    return st;
}

/* Reads a whole regular file of at most `max` bytes into a malloc'd buffer (caller frees) that has one extra NUL
 * byte after the contents, not counted in *len, so text files can be used as C strings. The file is opened
 * without blocking and must be a regular file: a FIFO would block the reader until a writer came (forever,
 * for a library call), and a device like /dev/urandom has no end. Its size is checked before a byte is read
 * (a 3 GiB file named as a bundle was read whole before its magic). FG_ERR_IO naming the path (too large:
 * saying the bound), or FG_ERR_NO_MEMORY. *data is NULL on failure. */
fg_status fg_read_file_max(const char *path, size_t max, uint8_t **data, size_t *len, fg_error *err) {
    *data = NULL;
    *len = 0;
    if (!path || !path[0])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "fg_read_file: the path is empty.");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return fg_fail(err, FG_ERR_IO, "cannot open '%s' for reading: %s.", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fg_fail(err, FG_ERR_IO, "cannot stat '%s': %s.", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fg_fail(err, FG_ERR_IO, "cannot read '%s': it is %s, not a regular file.", path,
                       S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISCHR(st.st_mode) ? "a character device" : "a special file");
    }
    if ((uint64_t)st.st_size > (uint64_t)max) {
        close(fd);
        return fg_fail(err, FG_ERR_IO, "cannot read '%s': it is %lld bytes, more than the %zu this file may have.",
                       path, (long long)st.st_size, max);
    }
    /* The size is a hint (a file may grow while it is read): read to end of file, up to max. */
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
    size_t used = 0;
    uint8_t *buf = fg_malloc(cap);
    if (!buf) {
        close(fd);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory reading '%s' (%zu bytes).", path, cap);
    }
    for (;;) {
        if (used + 1 >= cap) {
            if (used > max || cap > SIZE_MAX / 2) {
                free(buf);
                close(fd);
                return fg_fail(err, FG_ERR_IO, "cannot read '%s': it grew past the %zu bytes this file may have.",
                               path, max);
            }
            uint8_t *grown = fg_realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                close(fd);
                return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory reading '%s' (%zu bytes).", path, cap * 2);
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + used, cap - 1 - used);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            close(fd);
            return fg_fail(err, FG_ERR_IO, "cannot read '%s': %s.", path, strerror(e));
        }
        if (r == 0)
            break;
        used += (size_t)r;
    }
    if (close(fd) != 0) {
        int e = errno;
        free(buf);
        return fg_fail(err, FG_ERR_IO, "cannot close '%s' after reading: %s.", path, strerror(e));
    }
    buf[used] = '\0';
    *data = buf;
    *len = used;
    return FG_OK;
}

fg_status fg_read_file(const char *path, uint8_t **data, size_t *len, fg_error *err) {
    return fg_read_file_max(path, SIZE_MAX / 4, data, len, err);
}
