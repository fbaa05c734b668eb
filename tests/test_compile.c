/* test_compile.c: the compile pipeline with the real NVRTC (no GPU):
 * every item of a batch compiles to a cubin, a second batch takes them from
 * the compile cache, a code-generation error is the item's alone, a wait
 * that runs out gives the item up, and finishing early leaves nothing
 * behind (ASan).
 *
 * `test_compile hung` (the compile-hung test; 77 without test hooks): a
 * compile that hangs (the test hook's stall) is given up at the wait's
 * timeout, finishing the batch does not wait for it (its thread is
 * detached), and that thread, once it returns, touches neither the store
 * nor the NVRTC instance its caller already closed, and frees the batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/tuner/compile.h"
#include "src/tuner/space.h"

#include "tests/expect.h"

enum { N = 6 };

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The shape every case compiles for: a ragged row, so head handling is in. */
static const tuned__shape SHAPE = {TUNED_FP16, 64, 4097, TUNED_KERNEL_SOFTMAX, 0};

/* A new scratch directory from the template dir (made unique in place)
 * with a store in it, into *st; false if the directory cannot be made. */
static bool open_scratch_store(char *dir, tuned__store **st, tuned__err *e)
{
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return false;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/store", dir);
    *st = NULL;
    EXPECT(tuned__store_open(st, path, 0, e) == 0, "store: %s", e->msg);
    return true;
}

/* n random configs of SHAPE's space, drawn from seed. */
static void random_configs(tuned__config *cfgs, int n, uint64_t seed, tuned__err *e)
{
    tuned__space sp;
    EXPECT(tuned__space_init(&sp, &SHAPE, 90, 132, e) == 0, "space: %s", e->msg);
    tuned__rng rng = {seed};
    for (int i = 0; i < n; i++)
        tuned__space_random(&sp, &rng, &cfgs[i]);
    tuned__space_free(&sp);
}

static int test_hung(void)
{
#if !HAVE_TEST_HOOKS
    printf("compile hung: skipped, no test hooks in this build\n");
    return TEST_SKIP;
#else
    tuned__err e = {0};
    tuned__nvrtc *nv = NULL;
    if (tuned__nvrtc_load(&nv, &e) != 0) {
        printf("compile hung: skipped, %s\n", e.msg);
        return TEST_SKIP;
    }
    char dir[] = "/tmp/test_compile_hung.XXXXXX";
    tuned__store *st;
    if (!open_scratch_store(dir, &st, &e))
        return 1;
    tuned__config cfgs[2];
    random_configs(cfgs, 2, 7, &e);
    tuned__compile_target t = {.nvrtc = nv, .arch = 90, .shape = SHAPE, .cubins = st, .threads = 1};

    /* One thread: item 0 hangs for 6 s, item 1 waits behind it. */
    tuned__compile_test_hook_stall(6.0);
    tuned__compile_batch *b = NULL;
    EXPECT(tuned__compile_start(&b, &t, cfgs, 2, &e) == 0, "start: %s", e.msg);
    if (b == NULL)
        return expect_done("compile hung", dir);
    const tuned__blob *cubin;
    bool cached;
    double ms;
    tuned__err we = {0};
    double t0 = now_s();
    int rc = tuned__compile_wait(b, 0, 0.5, &cubin, &cached, &ms, &we);
    EXPECT(rc == TUNED_ETIMEOUT && strstr(we.msg, "given up") != NULL, "hung item: %d %s", rc,
           we.msg);
    tuned__compile_finish(b);
    double took = now_s() - t0;
    EXPECT(took < 2.0, "the batch took %.1f s with a compile timeout of 0.5 s", took);
    EXPECT(tuned__compile_stranded() == 1, "%zu threads stranded", tuned__compile_stranded());
    /* The caller's store and NVRTC go; the thread must not need them. */
    tuned__store_close(st);
    tuned__nvrtc_unload(nv);
    while (tuned__compile_stranded() > 0 && now_s() - t0 < 60)
        usleep(50000);
    EXPECT(tuned__compile_stranded() == 0, "the stranded thread never returned");
    return expect_done("compile hung", dir);
#endif
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "hung") == 0)
        return test_hung();
    if (argc != 1) {
        fprintf(stderr, "usage: test_compile [hung]\n");
        return 2;
    }
    tuned__err e = {0};
    tuned__nvrtc *nv = NULL;
    if (tuned__nvrtc_load(&nv, &e) != 0) {
        fprintf(stderr, "FAIL: %s\n", e.msg);
        return 1;
    }
    char dir[] = "/tmp/test_compile.XXXXXX";
    tuned__store *st;
    if (!open_scratch_store(dir, &st, &e))
        return 1;
    tuned__config cfgs[N];
    random_configs(cfgs, N, 99, &e);
    cfgs[N - 1].vec = 16; /* no 16-element fp16 vector: codegen refuses it */
    tuned__compile_target t = {.nvrtc = nv, .arch = 90, .shape = SHAPE, .cubins = st, .threads = 2};

    for (int pass = 0; pass < 2; pass++) {
        tuned__compile_batch *b = NULL;
        EXPECT(tuned__compile_start(&b, &t, cfgs, N, &e) == 0, "start: %s", e.msg);
        for (size_t i = 0; i < N && b != NULL; i++) {
            const tuned__blob *cubin;
            bool cached;
            double ms;
            tuned__err ie = {0};
            int rc = tuned__compile_wait(b, i, 0, &cubin, &cached, &ms, &ie);
            if (i == N - 1) {
                EXPECT(rc == TUNED_EINVAL && strstr(ie.msg, "16 bytes") != NULL,
                       "the bad config: %d %s", rc, ie.msg);
                continue;
            }
            EXPECT(rc == 0 && cubin != NULL && cubin->size > 4 &&
                       memcmp(cubin->data, "\177ELF", 4) == 0,
                   "item %zu: %s", i, ie.msg);
            /* The first pass compiles, the second finds every cubin cached. */
            EXPECT(cached == (pass == 1) && (pass == 1 ? ms == 0.0 : ms > 0.0),
                   "pass %d item %zu: cached %d, %.1f ms", pass, i, cached, ms);
        }
        tuned__compile_finish(b);
    }

    /* A wait that runs out gives the item up; finishing early is clean. */
    tuned__compile_target uncached = t;
    uncached.cubins = NULL;
    tuned__compile_batch *b = NULL;
    EXPECT(tuned__compile_start(&b, &uncached, cfgs, N, &e) == 0, "start: %s", e.msg);
    const tuned__blob *cubin;
    bool cached;
    double ms;
    tuned__err te = {0};
    int rc = tuned__compile_wait(b, 0, 1e-6, &cubin, &cached, &ms, &te);
    EXPECT(rc == TUNED_ETIMEOUT && cubin == NULL && strstr(te.msg, "given up") != NULL,
           "timeout: %d %s", rc, te.msg);
    tuned__compile_finish(b);

    tuned__store_close(st);
    tuned__nvrtc_unload(nv);
    return expect_done("compile", dir);
}
