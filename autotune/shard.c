/* shard.c: the tuning database's files (identity, moving a bad file aside, the lock, worker parts and their
 * merge) and the multi-GPU sweep that forks one worker process per GPU (see shard.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "autotune/shard.h"
#include "autotune/sweep.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "core/alloc.h"

/* shard_identity: see shard.h. */
fg_status shard_identity(const fg_context *ctx, fg_tune_identity *id, fg_error *err) {
    int driver = 0;
    FG_CU(err, ctx->cu->cuDriverGetVersion(&driver));
    tunedb_identity_init(id, ctx->device_name, ctx->arch, ctx->sm_count, driver, compile_nvrtc_version());
    return FG_OK;
}

/* Renames path to "<path>.bad-YYYYMMDD-HHMMSS" (adding "-2", "-3", ... when that exists: nothing is
 * ever overwritten) and writes the new name into moved (n bytes). Returns 0, or -1 with errno set. */
static int shard_move_aside(const char *path, char *moved, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32] = "unknown-time";
    if (localtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int i = 1; i <= 100; i++) {
        int w = i == 1 ? snprintf(moved, n, "%s.bad-%s", path, stamp) : snprintf(moved, n, "%s.bad-%s-%d", path, stamp, i);
        if (w < 0 || (size_t)w >= n) {
            errno = ENAMETOOLONG;
            return -1;
        }
        struct stat st;
        if (lstat(moved, &st) == 0) continue;
        if (errno != ENOENT) return -1;
        return rename(path, moved) == 0 ? 0 : -1;
    }
    errno = EEXIST;
    return -1;
}

/* shard_open_db: see shard.h. */
int shard_open_db(const char *path, const fg_tune_identity *id, fg_tunedb *db) {
    fg_error err;
    fg_error_clear(&err);
    fg_status st = tunedb_load(path, id, db, &err);
    if (st == FG_OK) return 0;
    tunedb_free(db);
    tunedb_init(db, id);
    if (st == FG_ERR_NOT_FOUND) return 0;
    if (st != FG_ERR_FORMAT) {
        sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
        return -1;
    }
    char moved[PATH_MAX + 64];
    if (shard_move_aside(path, moved, sizeof moved) != 0) {
        sweep_print(NULL, SWEEP_ERR, "%s; it could not be moved aside (%s), and it is not overwritten: move or remove it, or give "
            "another --db FILE", err.msg, strerror(errno));
        return -1;
    }
    sweep_print(NULL, SWEEP_ERR, "%s; moved it aside to %s and starting a new database", err.msg, moved);
    return 0;
}

/* ---- several GPUs: one worker process per device ---- */

/* One worker of a multi-GPU sweep: `flashgen tune SPACE --device D --db PART --shard K/N`. The parts are
 * named "<database>.gpu<D>.w<K>.part" (K: the worker's index in this run). */
typedef struct shard_child {
    int device;           /* CUDA ordinal */
    int group;            /* its database group (GPU model) */
    char part[PATH_MAX];  /* its own database file: the group's records at start, its results added */
    pid_t pid;            /* 0 until started */
    int status;           /* its exit status once it ended; -1 if it could not start or was killed */
} shard_child;

/* The devices of one GPU model: they share a database, and the space's problems are dealt among them. */
typedef struct shard_group {
    fg_tune_identity id;  /* the model, driver, NVRTC and flashgen version */
    char path[PATH_MAX];  /* the database */
    int ndev;             /* its devices */
} shard_group;

/* Whether two identities are the same GPU model and software stack (so one database serves both). */
static int shard_same_identity(const fg_tune_identity *a, const fg_tune_identity *b) {
    return strcmp(a->device, b->device) == 0 && a->arch == b->arch && a->sm_count == b->sm_count &&
           a->driver_version == b->driver_version && strcmp(a->nvrtc, b->nvrtc) == 0 &&
           strcmp(a->flashgen, b->flashgen) == 0;
}

/* The worker files of the database at path: "<path>.gpu<D>.w<K>.part" in its directory (this run's, or
 * ones a killed run left), found by name (not glob(3): the path may hold glob metacharacters). Fills
 * *names (malloc'ed full paths, *n of them; caller frees each and the array). Returns 0, or -1 after
 * printing why. */
static int shard_list_parts(const char *path, char ***names, int *n) {
    *names = NULL;
    *n = 0;
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path == 0 ? 1 : slash - path), path);
    else snprintf(dir, sizeof dir, ".");
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        sweep_print(NULL, SWEEP_ERR, "cannot list %s for worker files: %s", dir, strerror(errno));
        return -1;
    }
    int cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        size_t len = strlen(nm);
        if (len < blen + 9 || strncmp(nm, base, blen) != 0 || strncmp(nm + blen, ".gpu", 4) != 0 ||
            strcmp(nm + len - 5, ".part") != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            char **grown = fg_realloc(*names, (size_t)cap * sizeof *grown);
            if (!grown) {
                rc = -1;
                break;
            }
            *names = grown;
        }
        size_t need = strlen(dir) + 1 + len + 1;
        char *full = fg_malloc(need);
        if (!full) {
            rc = -1;
            break;
        }
        snprintf(full, need, "%s/%s", dir, nm);
        (*names)[(*n)++] = full;
    }
    closedir(d);
    if (rc != 0) sweep_print(NULL, SWEEP_ERR, "out of memory listing worker files");
    return rc;
}

/* shard_merge_parts: see shard.h. */
int shard_merge_parts(const char *path, const fg_tune_identity *id, int *added) {
    *added = 0;
    char **names = NULL;
    int n = 0;
    if (shard_list_parts(path, &names, &n) != 0) return -1;
    if (n == 0) return 0;
    int *merged = fg_calloc((size_t)n, sizeof *merged);
    fg_tunedb db;
    memset(&db, 0, sizeof db);
    int rc = merged && shard_open_db(path, id, &db) == 0 ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) {
        fg_tunedb part;
        memset(&part, 0, sizeof part);
        fg_error err;
        fg_error_clear(&err);
        fg_status st = tunedb_load(names[i], id, &part, &err);
        if (st == FG_ERR_FORMAT) {
            char moved[PATH_MAX + 64];
            sweep_print(NULL, SWEEP_ERR, "not merging %s: %s", names[i], err.msg);
            if (shard_move_aside(names[i], moved, sizeof moved) == 0) sweep_print(NULL, SWEEP_ERR, "moved it to %s", moved);
            else sweep_print(NULL, SWEEP_ERR, "and cannot move it aside (%s); it stays", strerror(errno));
            tunedb_free(&part);
            continue;
        }
        if (st != FG_OK) {
            sweep_print(NULL, SWEEP_ERR, "cannot read %s: %s; nothing merged, the worker files are kept", names[i], err.msg);
            rc = -1;
            tunedb_free(&part);
            break;
        }
        for (int r = 0; r < part.count && rc == 0; r++) {
            const fg_tune_record *x = &part.records[r];
            *added += !tunedb_has(&db, &x->cls, &x->spec);
            if (tunedb_add(&db, x, &err) != FG_OK) {
                sweep_print(NULL, SWEEP_ERR, "merging %s: %s", names[i], err.msg);
                rc = -1;
            }
        }
        merged[i] = rc == 0;
        tunedb_free(&part);
    }
    if (rc == 0) {
        fg_error err;
        fg_error_clear(&err);
        if (tunedb_save(path, &db, &err) != FG_OK) {
            sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
            rc = -1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (rc == 0 && merged && merged[i] && unlink(names[i]) != 0 && errno != ENOENT)
            sweep_print(NULL, SWEEP_ERR, "merged, but cannot remove %s: %s", names[i], strerror(errno));
        free(names[i]);
    }
    free(names);
    free(merged);
    tunedb_free(&db);
    return rc;
}

/* shard_lock: see shard.h. */
int shard_lock(const char *path) {
    char lock[PATH_MAX + 8];
    if (snprintf(lock, sizeof lock, "%s.lock", path) >= (int)sizeof lock) {
        sweep_print(NULL, SWEEP_ERR, "the database path %s is too long for its lock file", path);
        return -1;
    }
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        sweep_print(NULL, SWEEP_ERR, "cannot open the lock file %s: %s", lock, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        sweep_print(NULL, SWEEP_ERR, "another `flashgen tune` is filling %s (%s is locked); wait for it, or give another --db", path,
            lock);
        close(fd);
        return -1;
    }
    return fd;
}

/* Starts `flashgen tune SPACE --device D --db PART --shard K/N ...` as child c (this same program, via
 * /proc/self/exe). Returns 0, or -1 after printing why. */
static int shard_spawn(shard_child *c, const char *space_path, const sweep_opts *o, int shard, int nshards, int jobs) {
    char dev[16], shard_text[32], budget[32], jobs_text[16], iters[16];
    snprintf(dev, sizeof dev, "%d", c->device);
    snprintf(shard_text, sizeof shard_text, "%d/%d", shard, nshards);
    snprintf(jobs_text, sizeof jobs_text, "%d", jobs);
    snprintf(iters, sizeof iters, "%d", o->iters);
    char *argv[20]; /* 17 at most, NULL included */
    int n = 0;
    argv[n++] = "flashgen";
    argv[n++] = "tune";
    argv[n++] = (char *)space_path;
    argv[n++] = "--device";
    argv[n++] = dev;
    argv[n++] = "--db";
    argv[n++] = c->part;
    argv[n++] = "--shard";
    argv[n++] = shard_text;
    argv[n++] = "-j";
    argv[n++] = jobs_text;
    argv[n++] = "--iters";
    argv[n++] = iters;
    if (o->budget > 0) {
        snprintf(budget, sizeof budget, "%.0f", o->budget);
        argv[n++] = "--budget";
        argv[n++] = budget;
    }
    if (o->allow_spills) argv[n++] = "--allow-spills";
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        sweep_print(NULL, SWEEP_ERR, "cannot start the worker for device %d: %s", c->device, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Its own process group: a terminal's Ctrl-C reaches only the parent, which passes one SIGINT on
         * (a second one, from the terminal, would kill a worker mid-candidate); and a worker whose parent
         * dies is told to stop (SIGTERM: it finishes the candidate and saves its part). */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "flashgen tune: cannot run the worker for device %d (/proc/self/exe): %s\n", c->device,
                strerror(errno));
        _exit(127);
    }
    c->pid = pid;
    return 0;
}

/* The signal that asked a multi-GPU sweep to stop (forwarded to its workers), or 0. */
static volatile sig_atomic_t shard_signal;
static void shard_on_signal(int sig) { shard_signal = sig; }

/* shard_sweep: see shard.h. Each worker starts from a copy of its model's database (so what is measured is
 * skipped) and writes its own part file; the parent merges the parts when the workers end, however they
 * end, and prints the table. */
int shard_sweep(const char *space_path, const sweep_opts *o, const int *list, int nlist, int all,
                const sweep_bench *bench) {
    fg_error err;
    fg_error_clear(&err);
    fg_tune_space space;
    memset(&space, 0, sizeof space);
    if (space_load(space_path, 90, 1, &space, &err) != FG_OK) {
        sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
        return SWEEP_EXIT_FAIL;
    }
    int status = SWEEP_EXIT_FAIL, ndev = 0, ngroups = 0, nchildren = 0, handlers = 0;
    int devs[SHARD_MAX_DEVICES], locks[SHARD_MAX_DEVICES];
    for (int g = 0; g < SHARD_MAX_DEVICES; g++) locks[g] = -1;
    shard_group *groups = fg_calloc(SHARD_MAX_DEVICES, sizeof *groups);
    shard_child *kids = fg_calloc(SHARD_MAX_DEVICES, sizeof *kids);
    struct sigaction old_int, old_term;
    if (!groups || !kids) {
        sweep_print(NULL, SWEEP_ERR, "out of memory");
        goto done;
    }
    if (bench->check_shapes(bench->user, space_path, &space) != 0) goto done;
    const fg_cuda_api *cu = cuda_api_get(&err);
    int count = 0;
    if (!cu || cu->cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) {
        sweep_print(NULL, SWEEP_ERR, "no CUDA device to tune on%s%s", cu ? "" : ": ", cu ? "" : err.msg);
        goto done;
    }
    if (all) {
        for (int d = 0; d < count && d < SHARD_MAX_DEVICES; d++) devs[ndev++] = d;
    } else {
        for (int i = 0; i < nlist; i++) {
            if (list[i] >= count) {
                sweep_print(NULL, SWEEP_ERR, "--device %d: this machine has %d CUDA device%s (0-%d)", list[i], count, count == 1 ? "" : "s",
                    count - 1);
                goto done;
            }
            devs[ndev++] = list[i];
        }
    }
    fg_disk_cache cache;
    fg_error cerr;
    fg_error_clear(&cerr);
    int have_cache = cache_open(&cache, NULL, &cerr) == FG_OK;
    for (int i = 0; i < ndev; i++) {
        fg_context *ctx = bench->open_context(bench->user, devs[i]);
        if (!ctx) goto done;
        fg_tune_identity id;
        fg_status st = shard_identity(ctx, &id, &err);
        fg_context_destroy(ctx);
        if (st != FG_OK) {
            sweep_print(NULL, SWEEP_ERR, "device %d: %s", devs[i], err.msg);
            goto done;
        }
        int g = 0;
        while (g < ngroups && !shard_same_identity(&groups[g].id, &id)) g++;
        if (g == ngroups) {
            groups[g].id = id;
            if (o->db) {
                if (ngroups == 1) {
                    sweep_print(NULL, SWEEP_ERR, "--db names one database, but devices %d and %d are different GPUs (%s, %s): leave "
                        "--db out and each model gets its own", devs[0], devs[i], groups[0].id.device, id.device);
                    goto done;
                }
                snprintf(groups[g].path, sizeof groups[g].path, "%s", o->db);
            } else if (!have_cache) {
                sweep_print(NULL, SWEEP_ERR, "the tuning databases live in the disk cache directory, which is unusable (%s); give --db "
                    "FILE", cerr.msg);
                goto done;
            } else if (tunedb_path(cache.dir, &id, groups[g].path, sizeof groups[g].path, &err) != FG_OK) {
                sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
                goto done;
            }
            ngroups++;
        }
        kids[i].device = devs[i];
        kids[i].group = g;
        kids[i].status = -1;
        if (snprintf(kids[i].part, sizeof kids[i].part, "%s.gpu%d.w%d.part", groups[g].path, devs[i], i) >=
            (int)sizeof kids[i].part) {
            sweep_print(NULL, SWEEP_ERR, "the database path %s is too long for its worker files", groups[g].path);
            goto done;
        }
        groups[g].ndev++;
    }
    nchildren = ndev;

    /* Each model's database, locked for the sweep, with the parts a killed run may have left folded in,
     * seeds its workers. */
    for (int g = 0; g < ngroups; g++) {
        if ((locks[g] = shard_lock(groups[g].path)) < 0) goto done;
        int merged = 0;
        if (shard_merge_parts(groups[g].path, &groups[g].id, &merged) != 0) goto done;
        if (merged) sweep_print(NULL, SWEEP_INFO, "merged %d records left by an earlier run into %s", merged, groups[g].path);
        fg_tunedb db;
        memset(&db, 0, sizeof db);
        if (shard_open_db(groups[g].path, &groups[g].id, &db) != 0) goto done;
        int ok = 1;
        for (int i = 0; i < ndev && ok; i++)
            if (kids[i].group == g && tunedb_save(kids[i].part, &db, &err) != FG_OK) {
                sweep_print(NULL, SWEEP_ERR, "%s", err.msg);
                ok = 0;
            }
        sweep_print(NULL, SWEEP_INFO, "%s: %d device%s, database %s (%d records)", groups[g].id.device, groups[g].ndev,
                   groups[g].ndev == 1 ? "" : "s", groups[g].path, db.count);
        tunedb_free(&db);
        if (!ok) goto done;
    }

    /* The workers: compile threads split evenly over them unless -j says otherwise. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int jobs = o->jobs > 0 ? o->jobs : (int)((cpus > 0 ? cpus : 1) / ndev);
    if (jobs < 1) jobs = 1;
    shard_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = shard_on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, &old_int) != 0 || sigaction(SIGTERM, &sa, &old_term) != 0) {
        sweep_print(NULL, SWEEP_ERR, "cannot install the interrupt handler (%s)", strerror(errno));
        goto done;
    }
    handlers = 1;
    int started = 0;
    for (int g = 0; g < ngroups && !shard_signal; g++)
        for (int i = 0, k = 0; i < ndev && !shard_signal; i++)
            if (kids[i].group == g && shard_spawn(&kids[i], space_path, o, k++, groups[g].ndev, jobs) == 0) started++;
    sweep_print(NULL, SWEEP_INFO, "%d worker%s started, %d compile thread%s each", started, started == 1 ? "" : "s", jobs,
               jobs == 1 ? "" : "s");
    int forwarded = 0;
    for (int left = started; left > 0;) {
        /* Polled, so a signal that lands at any moment is passed on within 50 ms. */
        if (shard_signal && !forwarded) {
            for (int i = 0; i < ndev; i++)
                if (kids[i].pid > 0) kill(kids[i].pid, shard_signal == SIGINT ? SIGINT : SIGTERM);
            forwarded = 1;
        }
        int ws;
        pid_t pid = waitpid(-1, &ws, WNOHANG);
        if (pid == 0 || (pid < 0 && errno == EINTR)) {
            struct timespec nap = {0, 50 * 1000 * 1000};
            nanosleep(&nap, NULL);
            continue;
        }
        if (pid < 0) {
            sweep_print(NULL, SWEEP_ERR, "waiting for the workers: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < ndev; i++)
            if (kids[i].pid == pid) {
                kids[i].status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
                kids[i].pid = -pid; /* ended */
                if (kids[i].status != 0)
                    sweep_print(NULL, SWEEP_ERR, "the worker for device %d %s %d", kids[i].device,
                        WIFEXITED(ws) ? "exited with status" : "was killed by signal",
                        WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
                left--;
            }
    }

    /* Whatever happened, what the workers saved is merged. */
    status = started == nchildren ? SWEEP_EXIT_OK : SWEEP_EXIT_FAIL;
    for (int i = 0; i < ndev; i++)
        if (kids[i].status != 0) status = SWEEP_EXIT_FAIL;
    for (int g = 0; g < ngroups; g++) {
        int merged = 0;
        if (shard_merge_parts(groups[g].path, &groups[g].id, &merged) != 0) {
            status = SWEEP_EXIT_FAIL;
            continue;
        }
        sweep_print(NULL, SWEEP_INFO, "%s: merged the workers' parts (%d new records) into %s", groups[g].id.device, merged,
                   groups[g].path);
        if (status != SWEEP_EXIT_OK) continue;
        fg_tunedb db;
        memset(&db, 0, sizeof db);
        if (shard_open_db(groups[g].path, &groups[g].id, &db) != 0) {
            status = SWEEP_EXIT_FAIL;
            continue;
        }
        if (sweep_print_table(&space, &db) != 0) status = SWEEP_EXIT_FAIL;
        tunedb_free(&db);
    }
    if (shard_signal && status != SWEEP_EXIT_OK)
        sweep_print(NULL, SWEEP_ERR, "interrupted; what the workers saved is in the database or their part files; resume with the same "
            "command");

done:
    if (handlers) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    for (int g = 0; g < SHARD_MAX_DEVICES; g++)
        if (locks[g] >= 0) close(locks[g]);
    free(groups);
    free(kids);
    space_free(&space);
    return status;
}

