/* alloc.h: the library's host allocations, through one place a test can make fail (SQLite's practice).
 * Every malloc, calloc, realloc and strdup of core/, generator/, runtime/ and autotune/ goes through these;
 * fg_alloc_fail_at(n) makes the n-th allocation from now return NULL (once), so a test can walk n over every
 * allocation of an operation and check each failure comes back as a status with a sentence, leaking
 * nothing. Off (the only cost: one atomic load an allocation) unless a test sets it. free() is plain. */
#ifndef FG_ALLOC_H
#define FG_ALLOC_H

#include <stddef.h>

void *fg_malloc(size_t n);
void *fg_calloc(size_t count, size_t size);
void *fg_realloc(void *p, size_t n);
char *fg_strdup(const char *s);

/* Makes the n-th allocation from now fail (n >= 1); 0 turns the injection off. Process-wide. */
void fg_alloc_fail_at(long n);
/* Whether the armed failure is still ahead (1), or has happened or was never armed (0). */
int fg_alloc_fail_pending(void);

#endif
