/* registry.c: the process's open stores, shared by every user of one store
 * directory (store.h: tuned__store_acquire).
 *
 * LMDB's locks belong to the process, not to the environment: two
 * environments on one store in one process would drop each other's locks
 * (and closing one releases the other's reader slots). So every acquire of
 * one directory, whatever its spelling (a symlink, "dir/./", a relative
 * path), shares one environment, found by the directory's realpath and
 * counted; the last release closes it. This list is the one process-wide
 * mutable state the store owns; its mutex guards it, and acquire and
 * release may be called from any thread. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "tuned.h"

typedef struct shared_store {
    char real[PATH_MAX];  /* realpath of the directory */
    tuned__store *s;
    int refs;
    struct shared_store *next;
} shared_store;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_store *registry;

/* The entry of directory real, or of store s; NULL when none. Under
 * registry_mu. */
static shared_store *find(const char *real, const tuned__store *s)
{
    for (shared_store *r = registry; r != NULL; r = r->next)
        if ((real != NULL && strcmp(r->real, real) == 0) || (s != NULL && r->s == s))
            return r;
    return NULL;
}

/* Opens path as flags ask; without READONLY, a store this user cannot
 * write is opened read-only instead (its results can still be read). */
static int open_store(const char *path, unsigned flags, tuned__store **s, tuned__err *e)
{
    int rc = tuned__store_open(s, path, flags, e);
    if (rc == TUNED_ESTORE && (flags & TUNED__STORE_READONLY) == 0) {
        tuned__err ro = {0};
        if (tuned__store_open(s, path, flags | TUNED__STORE_READONLY, &ro) == 0) {
            tuned__err_clear(e);
            rc = 0;
        }
    }
    return rc;
}

int tuned__store_acquire(const char *path, unsigned flags, tuned__store **out, tuned__err *e)
{
    *out = NULL;
    pthread_mutex_lock(&registry_mu);
    char real[PATH_MAX];
    shared_store *r = realpath(path, real) != NULL ? find(real, NULL) : NULL;
    int rc = 0;
    if (r == NULL) {
        tuned__store *s = NULL;
        if ((rc = open_store(path, flags, &s, e)) == 0 && (r = calloc(1, sizeof *r)) == NULL) {
            tuned__store_close(s);
            rc = tuned__errf(e, TUNED_ENOMEM, "store %s: out of memory", path);
        }
        if (rc == 0) {
            /* The directory exists now, even if it did not before. */
            if (realpath(path, r->real) == NULL)
                snprintf(r->real, sizeof r->real, "%s", path);
            r->s = s;
            r->next = registry;
            registry = r;
        }
    }
    if (rc == 0) {
        r->refs++;
        *out = r->s;
    }
    pthread_mutex_unlock(&registry_mu);
    return rc;
}

void tuned__store_release(tuned__store *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&registry_mu);
    shared_store *r = find(NULL, s);
    if (r != NULL && --r->refs == 0) {
        for (shared_store **p = &registry; *p != NULL; p = &(*p)->next) {
            if (*p == r) {
                *p = r->next;
                break;
            }
        }
        tuned__store_close(r->s);
        free(r);
    }
    pthread_mutex_unlock(&registry_mu);
}

const char *tuned__store_real_path(const tuned__store *s)
{
    pthread_mutex_lock(&registry_mu);
    shared_store *r = find(NULL, s);
    pthread_mutex_unlock(&registry_mu);
    return r != NULL ? r->real : tuned__store_path(s);
}
