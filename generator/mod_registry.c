/* mod_registry.c: the custom mods' trees this process has registered, by id (mod.h). Variants name a mod by
 * its id only (fg_spec.mod), so the emitter finds the tree here. Entries are never removed: an id names one
 * tree forever, and a kernel compiled from it may be cached under that name. A linear table under a mutex: at
 * most MOD_REGISTRY_MAX trees, looked up once per variant's emission. */
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "generator/mod.h"

typedef struct registered {
    char id[MOD_ID_LEN + 1];
    fg_mod *tree;
} registered;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static registered table[MOD_REGISTRY_MAX];
static int count;

static const fg_mod *find_locked(const char *id) {
    for (int i = 0; i < count; i++)
        if (strcmp(table[i].id, id) == 0) return table[i].tree;
    return NULL;
}

fg_status mod_register(const fg_mod *m, char *id, fg_error *err) {
    fg_status st = mod_check(m, err);
    if (st != FG_OK) return st;
    char own[MOD_ID_LEN + 1];
    mod_id(m, own);
    pthread_mutex_lock(&lock);
    if (!find_locked(own)) {
        if (count == MOD_REGISTRY_MAX) {
            pthread_mutex_unlock(&lock);
            return fg_fail(err, FG_ERR_UNSUPPORTED, "this process has registered %d custom mods, the most it keeps",
                           MOD_REGISTRY_MAX);
        }
        fg_mod *copy = fg_malloc(sizeof *copy);
        if (!copy) {
            pthread_mutex_unlock(&lock);
            return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory registering a custom mod");
        }
        memcpy(copy, m, sizeof *copy);
        memcpy(table[count].id, own, sizeof own);
        table[count++].tree = copy;
    }
    pthread_mutex_unlock(&lock);
    if (id) memcpy(id, own, sizeof own);
    return FG_OK;
}

const fg_mod *mod_lookup(const char *id) {
    if (!id) return NULL;
    pthread_mutex_lock(&lock);
    const fg_mod *m = find_locked(id);
    pthread_mutex_unlock(&lock);
    return m;
}
