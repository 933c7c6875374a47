/* shard.h: the tuning database's files and the multi-GPU sweep. One database per GPU model and software
 * stack (its identity); a file for another identity, or a corrupt one, is moved aside, never overwritten;
 * one sweep at a time fills a database (a lock file). `tune --device LIST|all` runs one worker process per
 * GPU, each writing its own part file, which the parent merges into the database however the workers end. */
#ifndef FG_SHARD_H
#define FG_SHARD_H

#include "autotune/sweep.h"

#define SHARD_MAX_DEVICES 64 /* GPUs of one multi-GPU sweep */

/* The identity of the database for ctx's GPU and this build. FG_ERR_CUDA when the driver version
 * cannot be read. */
fg_status shard_identity(const fg_context *ctx, fg_tune_identity *id, fg_error *err);

/* Loads the database at path for identity id into *db: a missing file gives a new database; a file for
 * another GPU or version, or a corrupt one, is moved aside (said, with why) and a new one begun. Returns
 * 0, or -1 after printing why it can do neither (an unreadable file, one it cannot move). */
int shard_open_db(const char *path, const fg_tune_identity *id, fg_tunedb *db);

/* Takes an exclusive lock on "<path>.lock" for this sweep, so two sweeps never fill one database (or its
 * worker files) at once; the lock goes with the process. Returns the descriptor (keep it open), or -1
 * after printing why. */
int shard_lock(const char *path);

/* Folds every worker file "<path>.gpu<D>.w<K>.part" of the database at path into it: records of the parts
 * replace the same (class, variant) in the database, which is then saved atomically, and only then are the
 * merged parts removed. A part for another identity or a corrupt one is moved aside with a message, never
 * merged; any other failure (I/O, memory) stops the merge with every part kept. *added counts the records
 * the parts added or changed. Returns 0, or -1 after printing why. */
int shard_merge_parts(const char *path, const fg_tune_identity *id, int *added);

/* `flashgen tune SPACE --device all|LIST` (all, or the nlist ordinals of list): one worker process per GPU
 * (`flashgen tune ... --shard K/N`, this program again). Devices of one model share one database and the
 * space's problems are dealt among them round-robin; each model gets its own database. Returns the exit
 * status: 0 when every worker succeeded. */
int shard_sweep(const char *space_path, const sweep_opts *o, const int *list, int nlist, int all,
                const sweep_bench *bench);

#endif
