/* store_internal.h: store entry points for tests, not for the library.
 *
 * tuned__store_open() always starts with a 64 MiB map; tests open with a
 * tiny one instead so that a few thousand records exercise the
 * MDB_MAP_FULL -> grow -> retry path in well under a second. The test hook
 * lets a crash test stop a writer at a known point inside its write
 * transaction before killing it; it exists only in a build with test hooks. */
#ifndef TUNED_CACHE_STORE_INTERNAL_H
#define TUNED_CACHE_STORE_INTERNAL_H

#include <stddef.h>

#include "src/common/err.h"
#include "cache/store.h"

/* The initial map size of tuned__store_open(). */
#define TUNED__STORE_MAPSIZE ((size_t)64 << 20)

/* tuned__store_open() with an initial map of mapsize bytes (a multiple of
 * the page size; 0 means TUNED__STORE_MAPSIZE). An existing store whose
 * map is already larger keeps its size. */
int tuned__store_open_mapsize(tuned__store **out, const char *path, unsigned flags,
                              size_t mapsize, tuned__err *e);

#ifdef TUNED_TEST_HOOKS
/* Calls fn(ctx, "before-commit") in every write transaction after its work
 * and before its commit. NULL removes the hook. Only in a build with test
 * hooks (-Dtest_hooks=true). */
void tuned__store_set_test_hook(tuned__store *s, void (*fn)(void *ctx, const char *where),
                                void *ctx);
#endif

/* Reader slots of dead processes that tuned__store_open() cleared. */
int tuned__store_stale_readers(const tuned__store *s);

/* The current map size in bytes. */
size_t tuned__store_mapsize(tuned__store *s);

#endif
