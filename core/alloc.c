/* alloc.c: the library's allocations with an injectable failure (alloc.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"

/* Allocations left before the one that fails; 0: off. */
static atomic_long countdown;

/* 1 for the allocation the countdown reaches. */
static int inject(void) {
    if (atomic_load_explicit(&countdown, memory_order_relaxed) <= 0) return 0;
    return atomic_fetch_sub(&countdown, 1) == 1;
}

void *fg_malloc(size_t n) { return inject() ? NULL : malloc(n); }
void *fg_calloc(size_t count, size_t size) { return inject() ? NULL : calloc(count, size); }
void *fg_realloc(void *p, size_t n) { return inject() ? NULL : realloc(p, n); }

char *fg_strdup(const char *s) {
    if (inject()) return NULL;
    return strdup(s);
}

void fg_alloc_fail_at(long n) { atomic_store(&countdown, n > 0 ? n : 0); }

int fg_alloc_fail_pending(void) { return atomic_load(&countdown) > 0; }
