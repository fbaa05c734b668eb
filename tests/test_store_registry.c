/* test_store_registry.c: one LMDB environment per store directory in a
 * process (cache/registry.c): acquires of one directory through different
 * spellings (a symlink, "dir/./", a relative path) share one store, counted;
 * the last release closes it; read-only acquires share a writable store; a
 * store this user cannot write falls back to read-only; acquires and
 * releases from many threads at once.
 *
 * "One environment" is checked from outside the store: the number of this
 * process's file descriptors open on the directory's lock.mdb (LMDB opens
 * it once per environment), which must be 1 while any acquire is held and
 * 0 after the last release. */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/store.h"
#include "tests/store_testlib.h"
#include "tuned.h"

/* File descriptors of this process open on DIR/lock.mdb. */
static int lock_fds(const char *dir)
{
    char real[PATH_MAX], want[PATH_MAX + 16], link[PATH_MAX + 16], got[PATH_MAX];
    if (realpath(dir, real) == NULL)
        return 0;
    snprintf(want, sizeof want, "%s/lock.mdb", real);
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) {
        fprintf(stderr, "opendir /proc/self/fd failed\n");
        failures++;
        return -1;
    }
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        snprintf(link, sizeof link, "/proc/self/fd/%s", de->d_name);
        ssize_t len = readlink(link, got, sizeof got - 1);
        if (len <= 0)
            continue;
        got[len] = '\0';
        n += strcmp(got, want) == 0;
    }
    closedir(d);
    return n;
}

static void test_spellings(void)
{
    tuned__err e = {0};
    char dir[1024], link[1100], dotted[1100], relative[1100];
    dir_path(dir, sizeof dir, "spell");
    snprintf(link, sizeof link, "%s-link", dir);
    snprintf(dotted, sizeof dotted, "%s/./", dir);
    tuned__store *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    EXPECT_RC(tuned__store_acquire(dir, 0, &a, &e), 0, &e); /* creates it */
    EXPECT(a != NULL && !tuned__store_readonly(a));
    EXPECT(symlink(dir, link) == 0);
    EXPECT_RC(tuned__store_acquire(link, 0, &b, &e), 0, &e);
    EXPECT_RC(tuned__store_acquire(dotted, 0, &c, &e), 0, &e);
    EXPECT(b == a && c == a);
    EXPECT(lock_fds(dir) == 1);

    /* A relative spelling, from the parent directory. */
    char cwd[PATH_MAX];
    EXPECT(getcwd(cwd, sizeof cwd) != NULL);
    EXPECT(chdir(root) == 0);
    snprintf(relative, sizeof relative, "./%s", strrchr(dir, '/') + 1);
    EXPECT_RC(tuned__store_acquire(relative, 0, &d, &e), 0, &e);
    EXPECT(chdir(cwd) == 0);
    EXPECT(d == a);

    char real[PATH_MAX];
    EXPECT(realpath(dir, real) != NULL && strcmp(tuned__store_real_path(a), real) == 0);

    /* Releases but the last leave it open and usable. */
    tuned__store_release(a);
    tuned__store_release(d);
    tuned__store_release(c);
    EXPECT(lock_fds(dir) == 1);
    tuned__record r, got;
    make_record(&r, "GPU registry", 64, 128);
    EXPECT_RC(tuned__store_put_best(b, &r, &e), 0, &e);
    EXPECT_RC(tuned__store_get_best(b, &r.key, &got, NULL, &e), 0, &e);
    tuned__store_release(b);
    EXPECT(lock_fds(dir) == 0);

    /* Acquired again after the last release: a fresh environment that
     * still holds what the old one wrote. */
    EXPECT_RC(tuned__store_acquire(link, 0, &a, &e), 0, &e);
    EXPECT(lock_fds(dir) == 1);
    EXPECT_RC(tuned__store_get_best(a, &r.key, &got, NULL, &e), 0, &e);
    EXPECT(record_equal(&r, &got));
    tuned__store_release(a);
    EXPECT(lock_fds(dir) == 0);
    tuned__store_release(NULL);
}

static void test_readonly(void)
{
    tuned__err e = {0};
    char dir[1024], missing[1024];
    dir_path(dir, sizeof dir, "ro");
    dir_path(missing, sizeof missing, "ro-missing");
    tuned__store *w = NULL, *r = NULL, *r2 = NULL;

    /* Read-only of nothing: not found, and nothing left open. */
    EXPECT_RC(tuned__store_acquire(missing, TUNED__STORE_READONLY, &r, &e), TUNED_ENOTFOUND, &e);
    EXPECT(r == NULL);

    /* A read-only acquire shares a writable store. */
    EXPECT_RC(tuned__store_acquire(dir, 0, &w, &e), 0, &e);
    EXPECT_RC(tuned__store_acquire(dir, TUNED__STORE_READONLY, &r, &e), 0, &e);
    EXPECT(r == w && !tuned__store_readonly(r));
    tuned__store_release(w);
    tuned__store_release(r);
    EXPECT(lock_fds(dir) == 0);

    /* Acquired read-only first, it stays read-only for a later writer. */
    EXPECT_RC(tuned__store_acquire(dir, TUNED__STORE_READONLY, &r, &e), 0, &e);
    EXPECT(r != NULL && tuned__store_readonly(r));
    EXPECT_RC(tuned__store_acquire(dir, 0, &w, &e), 0, &e);
    EXPECT(w == r && tuned__store_readonly(w));
    tuned__record rec;
    make_record(&rec, "GPU registry", 64, 256);
    EXPECT_RC(tuned__store_put_best(w, &rec, &e), TUNED_EINVAL, &e);
    tuned__store_release(w);
    tuned__store_release(r);
    EXPECT(lock_fds(dir) == 0);

    /* A store this user cannot write: read-only instead (root writes
     * anyway, so the case says nothing there). */
    if (geteuid() != 0) {
        EXPECT(chmod(dir, 0500) == 0);
        EXPECT_RC(tuned__store_acquire(dir, 0, &r2, &e), 0, &e);
        EXPECT(r2 != NULL && tuned__store_readonly(r2));
        tuned__store_release(r2);
        EXPECT(chmod(dir, 0700) == 0);
    }
}

enum { THREADS = 8, ROUNDS = 25 };

static char thread_dir[1024];

static void *acquire_loop(void *arg)
{
    long id = (long)(intptr_t)arg;
    char spelling[1100];
    for (int i = 0; i < ROUNDS; i++) {
        snprintf(spelling, sizeof spelling, (id + i) % 2 ? "%s/./" : "%s", thread_dir);
        tuned__err e = {0};
        tuned__store *s = NULL;
        if (tuned__store_acquire(spelling, 0, &s, &e) != 0) {
            fprintf(stderr, "thread %ld: %s\n", id, e.msg);
            return (void *)1;
        }
        uint64_t txn;
        int rc = tuned__store_txnid(s, &txn, &e);
        int held = lock_fds(thread_dir);
        tuned__store_release(s);
        if (rc != 0 || held != 1) {
            fprintf(stderr, "thread %ld: txnid %d, %d environments\n", id, rc, held);
            return (void *)1;
        }
    }
    return NULL;
}

static void test_threads(void)
{
    dir_path(thread_dir, sizeof thread_dir, "threads");
    tuned__err e = {0};
    tuned__store *s = NULL;
    EXPECT_RC(tuned__store_acquire(thread_dir, 0, &s, &e), 0, &e); /* creates it */
    tuned__store_release(s);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, acquire_loop, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) {
        void *ret = NULL;
        EXPECT(pthread_join(t[i], &ret) == 0);
        EXPECT(ret == NULL);
    }
    EXPECT(lock_fds(thread_dir) == 0);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    static const test_case tests[] = {
        {"one store for every spelling of a directory", test_spellings},
        {"read-only acquires", test_readonly},
        {"acquire and release from many threads", test_threads},
    };
    return run_tests("test_store_registry", tests, sizeof tests / sizeof tests[0]);
}
