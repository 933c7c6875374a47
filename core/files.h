/* files.h: whole-file reads and atomic whole-file writes (files.c). */
#ifndef FG_FILES_H
#define FG_FILES_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

/* Names of temporary files start with this, so a directory's cleaner can recognize (and remove stale)
 * ones: `.tmp-<pid>-<tid>-<n>-<base name>`. */
#define FG_TMP_PREFIX ".tmp-"

/* Writes `len` bytes to `path` atomically (temp + fsync + rename), a new file with mode 0600. Shared by the
 * cache, bundles, `flashgen compile -o` and the tuning database. The path must name a regular file or
 * nothing: a symbolic link, device, FIFO, socket or directory is refused (FG_ERR_INVALID_ARGUMENT) rather
 * than replaced. A file that is replaced keeps its permission bits. */
fg_status fg_write_file_atomic(const char *path, const void *data, size_t len, fg_error *err);
/* The same with a new file's permission bits `mode`, less the process's umask: bundles and C sources are
 * written 0644 because they are meant to be shipped and read by other users; the disk cache, cubins and
 * tuning databases 0600. */
fg_status fg_write_file_atomic_mode(const char *path, const void *data, size_t len, unsigned mode, fg_error *err);

/* fg_write_file_atomic_mode of file `base` in the directory open as dfd (left open), every step relative to it
 * (openat, renameat), so a directory swapped under its path after dfd was opened is never written; dir_shown
 * names the directory in messages. */
fg_status fg_write_file_atomic_at(int dfd, const char *dir_shown, const char *base, const void *data, size_t len,
                                  unsigned mode, fg_error *err);

/* Reads a whole regular file of at most `max` bytes (malloc'd, caller frees; a NUL byte follows the contents, not
 * counted in *len, so text can be used as a C string), opened without blocking: a FIFO, device, directory
 * or a file over `max` is refused before any byte is read. FG_ERR_IO naming the path on failure. */
fg_status fg_read_file_max(const char *path, size_t max, uint8_t **data, size_t *len, fg_error *err);
/* The same without a size bound of the caller's. */
fg_status fg_read_file(const char *path, uint8_t **data, size_t *len, fg_error *err);

/* Whether a temporary file `name` (FG_TMP_PREFIX<pid>-...) with status st is abandoned: its writing process no
 * longer exists on this machine, or it is older than FG_TMP_STALE_SECONDS. A name without a pid is not ours. */
#define FG_TMP_STALE_SECONDS 3600
struct stat;
int fg_tmp_is_stale(const char *name, const struct stat *st);
/* Removes the abandoned temporary files (fg_tmp_is_stale) in the directory open as dirfd (left open); with
 * `base` non-NULL only those of writes to that directory's `base`. Best effort: returns how many were removed
 * and adds their bytes to *bytes (may be NULL). Killed writers leave them behind. */
int fg_reap_tmp_files_at(int dirfd, const char *base, unsigned long long *bytes);

/* Reads exactly n bytes from fd, retrying short reads and EINTR. Returns 0, or -1 with errno set (EIO for
 * an early end of file, which means the file shrank under the reader). */
int file_read_exact(int fd, uint8_t *p, size_t n);

#endif
