/* store_testlib.h: what the store's test programs share: the one failure
 * count of expect.h across their files, a scratch root removed at the end,
 * test records, and raw LMDB writes that play a foreign or broken writer.
 * Include it instead of expect.h. */
#ifndef TUNED_TESTS_STORE_TESTLIB_H
#define TUNED_TESTS_STORE_TESTLIB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cache/store.h"
#include "tuned.h"

#define EXPECT_SHARED
#include "tests/expect.h"

extern char root[1024];
extern const char *self_exe; /* argv[0] when it is a path (valgrind), else /proc/self/exe */

/* A fresh path name under root (not created). */
void dir_path(char *buf, size_t size, const char *name);

/* Opens (creating it) the store root/name with an initial map of mapsize
 * bytes (0: the default), its path left in path; NULL, with the failure
 * counted, when it does not open. */
tuned__store *open_test_store(char *path, size_t size, const char *name, size_t mapsize);

/* A valid record of shape rows x cols fp16 measured on GPU identity gpu
 * under this build's policy. */
void make_record(tuned__record *r, const char *gpu, uint64_t rows, uint64_t cols);

/* A valid history entry for r's key. */
void make_eval(tuned__store_eval *ev, const tuned__store_key *key, const char *config,
               double median_us);

/* Every field equal (doubles bit for bit). */
int record_equal(const tuned__record *a, const tuned__record *b);

/* Writes one key/value into db dbname of the store at path with plain LMDB
 * calls, as a foreign or broken writer would. The store need not be
 * closed. Returns the LMDB code. */
int raw_put(const char *path, const char *dbname, const void *k, size_t kn, const void *v,
            size_t vn);

/* Writes a file with the given bytes. */
void write_file(const char *path, const void *data, size_t n);

typedef struct test_case {
    const char *name;
    void (*fn)(void);
} test_case;

/* Creates root under $TMPDIR, runs each test (printing ok/FAIL and its
 * time), removes root. Returns the exit status. */
int run_tests(const char *prog, const test_case *tests, size_t n);

double now_s(void);

#endif
