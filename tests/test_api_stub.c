/* test_api_stub.c: the public API's tunes on the test stand-in driver
 * (tests/stub_cuda/, put first on LD_LIBRARY_PATH by tests/meson.build), so
 * that tuned_open() succeeds on a machine without a GPU. No kernel runs:
 * every tune here is a fake `tuned` script, or refused before one starts.
 *
 *   space     a shape no variant fits is TUNED_ENOSPACE from tuned_tune() at
 *             once, with the reason, and no child is started; tuned__tune()
 *             says the same before the evaluator allocates anything
 *   callback  tuned_tune() and tuned_close() called from a progress
 *             callback (on the tuned_tune caller's thread and on the
 *             handle's background thread) are refused with TUNED_EINVAL
 *             and a message instead of waiting for the tune lock forever
 *
 * Exit 77 where NVRTC cannot be loaded (tuned_open needs it). A watchdog
 * turns a deadlock into a failure. */
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/api/api.h"
#include "src/tuner/tune.h"

#define EXPECT_ATOMIC
#include "tests/expect.h"

static char tmpdir[256];
static char script[400], ran[400];
static long (*stub_allocs)(void);

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A fake `tuned`: notes that it ran, reports one generation, succeeds. */
static void write_script(void)
{
    snprintf(script, sizeof script, "%s/fake-tuned", tmpdir);
    snprintf(ran, sizeof ran, "%s/ran.txt", tmpdir);
    FILE *f = fopen(script, "w");
    if (f == NULL) {
        perror(script);
        exit(1);
    }
    fprintf(f,
            "#!/bin/sh\n"
            "echo \"$@\" >> '%s'\n"
            "echo '{\"progress\":{\"state\":\"running\",\"generation\":0,\"evaluated\":1,"
            "\"failed\":0,\"budget\":10}}' >&2\n"
            "exit 0\n",
            ran);
    fclose(f);
    chmod(script, 0755);
}

static bool script_ran(void)
{
    return access(ran, F_OK) == 0;
}

static int open_handle(tuned_handle **h, tuned_policy policy, tuned_progress_fn fn, void *ctx)
{
    char store[400];
    snprintf(store, sizeof store, "%s/store", tmpdir);
    tuned_options o;
    tuned_options_init(&o);
    o.store = store;
    o.tuned_path = script;
    o.policy = policy;
    o.on_progress = fn;
    o.progress_ctx = ctx;
    return tuned_open(h, &o);
}

/* ---- space ---- */

static void test_space(void)
{
    tuned_handle *h = NULL;
    int rc = open_handle(&h, TUNED_POLICY_NEVER, NULL, NULL);
    EXPECT(rc == 0, "open: %s", tuned_last_error(NULL));
    if (rc != 0)
        return;
    /* 8 rows of a million fp32 columns: too long for any variant on sm_90
     * (tests/test_space.c). */
    unlink(ran);
    double t0 = now_s();
    rc = tuned_tune(h, TUNED_KERNEL_SOFTMAX, 8, 1000000, TUNED_FP32, 0, 1);
    EXPECT(rc == TUNED_ENOSPACE, "tuned_tune of 8x1000000: %d (%s) %s", rc, tuned_strerror(rc),
           tuned_last_error(h));
    EXPECT(strstr(tuned_last_error(h), "tuned_tune softmax 8x1000000 fp32: ") != NULL &&
               strstr(tuned_last_error(h), "no variant fits") != NULL,
           "message: %s", tuned_last_error(h));
    EXPECT(!script_ran(), "a child was started for a shape without a variant");
    EXPECT(now_s() - t0 < 10, "ENOSPACE took %.1f s", now_s() - t0);
    tuned_choice c;
    rc = tuned_lookup(h, TUNED_KERNEL_SOFTMAX, 8, 1000000, TUNED_FP32, 0, &c);
    EXPECT(rc == TUNED_ENOSPACE, "lookup agrees: %d %s", rc, tuned_last_error(h));
    /* A shape with variants still reaches the child. */
    EXPECT(tuned_tune(h, TUNED_KERNEL_SOFTMAX, 64, 1024, TUNED_FP16, 0, 1) == 0 && script_ran(), "64x1024: %s",
           tuned_last_error(h));
    tuned_close(h);

    /* The tuner itself: ENOSPACE before the evaluator allocates a byte. */
    tuned__err e = {0};
    tuned__driver *d = NULL;
    tuned__nvrtc *n = NULL;
    EXPECT_OK(tuned__driver_load(&d, &e), &e);
    EXPECT_OK(tuned__nvrtc_load(&n, &e), &e);
    if (d == NULL || n == NULL)
        return;
    tuned__tune_request r;
    tuned__tune_request_default(&r);
    r.shape = (tuned__shape){.dtype = TUNED_FP32, .rows = 8, .cols = 1000000};
    r.device = 0;
    tuned__tune_outcome out;
    long before = stub_allocs();
    tuned__err_clear(&e);
    EXPECT_RC(tuned__tune(d, n, &r, NULL, NULL, &out, &e), TUNED_ENOSPACE, &e);
    EXPECT_MSG(&e, "no variant fits 8x1000000 fp32");
    EXPECT(stub_allocs() == before, "the evaluator allocated %ld buffers first",
           stub_allocs() - before);
    tuned__nvrtc_unload(n);
    tuned__driver_unload(d);
}

/* ---- callback ---- */

typedef struct nested {
    tuned_handle *h;
    atomic_int calls;
    int tune_rc;
    char tune_msg[512], close_msg[512];
} nested;

static void nesting_cb(void *ctx, const tuned_progress *p)
{
    (void)p;
    nested *s = ctx;
    if (atomic_fetch_add(&s->calls, 1) != 0)
        return;
    s->tune_rc = tuned_tune(s->h, TUNED_KERNEL_SOFTMAX, 32, 2048, TUNED_FP16, 0, 1);
    snprintf(s->tune_msg, sizeof s->tune_msg, "%s", tuned_last_error(s->h));
    tuned_close(s->h); /* refused: the handle stays open */
    snprintf(s->close_msg, sizeof s->close_msg, "%s", tuned_last_error(s->h));
}

static void check_nested(nested *s, const char *where)
{
    EXPECT(s->tune_rc == TUNED_EINVAL && strstr(s->tune_msg, "progress callback") != NULL,
           "%s: nested tuned_tune: %d %s", where, s->tune_rc, s->tune_msg);
    EXPECT(strstr(s->close_msg, "tuned_close") != NULL &&
               strstr(s->close_msg, "progress callback") != NULL,
           "%s: nested tuned_close: %s", where, s->close_msg);
}

static void test_callback(void)
{
    /* On the caller's thread, under tuned_tune(). */
    nested s = {.tune_rc = 1};
    int rc = open_handle(&s.h, TUNED_POLICY_NEVER, nesting_cb, &s);
    EXPECT(rc == 0, "open: %s", tuned_last_error(NULL));
    if (rc != 0)
        return;
    rc = tuned_tune(s.h, TUNED_KERNEL_SOFTMAX, 64, 1024, TUNED_FP16, 0, 1);
    EXPECT(rc == 0, "the outer tune: %d %s", rc, tuned_last_error(s.h));
    EXPECT(atomic_load(&s.calls) == 1, "%d progress calls", atomic_load(&s.calls));
    check_nested(&s, "tuned_tune's thread");
    /* The handle survived the refused close and still tunes. */
    tuned_choice c;
    EXPECT(tuned_lookup(s.h, TUNED_KERNEL_SOFTMAX, 64, 1024, TUNED_FP16, 0, &c) == 0, "lookup after: %s",
           tuned_last_error(s.h));
    tuned_close(s.h);

    /* On the handle's background thread (TUNED_POLICY_PROCESS). */
    nested b = {.tune_rc = 1};
    rc = open_handle(&b.h, TUNED_POLICY_PROCESS, nesting_cb, &b);
    EXPECT(rc == 0, "open: %s", tuned_last_error(NULL));
    if (rc != 0)
        return;
    EXPECT(tuned_lookup(b.h, TUNED_KERNEL_SOFTMAX, 128, 4096, TUNED_FP16, 0, &c) == 0, "lookup: %s",
           tuned_last_error(b.h));
    double t0 = now_s();
    while (true) {
        EXPECT(tuned_lookup(b.h, TUNED_KERNEL_SOFTMAX, 128, 4096, TUNED_FP16, 0, &c) == 0, "lookup: %s",
               tuned_last_error(b.h));
        if (c.tune == TUNED_TUNE_DONE || c.tune == TUNED_TUNE_FAILED || now_s() - t0 > 20)
            break;
        usleep(20000);
    }
    EXPECT(c.tune == TUNED_TUNE_DONE, "background tune: state %d (%s)", (int)c.tune,
           c.tune_message);
    check_nested(&b, "the background thread");
    tuned_close(b.h);
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "test_api_stub: still running after 90 s (a deadlock?)\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(1);
}

/* ---- cross-entropy's argument checks (nothing is launched) ---- */

/* A refused call: code and a message that names what is wrong. */
static void expect_refused(tuned_handle *h, int rc, const char *needle, const char *what)
{
    EXPECT(rc == TUNED_EINVAL && strstr(tuned_last_error(h), needle) != NULL,
           "%s: %d, %s", what, rc, tuned_last_error(h));
}

static void test_cross_entropy_args(void)
{
    tuned_handle *h = NULL;
    int rc = open_handle(&h, TUNED_POLICY_NEVER, NULL, NULL);
    EXPECT(rc == 0, "open: %s", tuned_last_error(NULL));
    if (rc != 0)
        return;
    /* Addresses only: every call below is refused before any touches memory. */
    char *logits = (char *)0x100000, *labels = (char *)0x900000;
    float *loss = (float *)0xa00000, *lse = (float *)0xb00000;
    const long long rows = 64, cols = 1000;
    tuned_ce_options o;
    tuned_ce_options_init(&o);
    EXPECT(o.scale == 1.0f && o.ignore_index == -100 && o.reduction == TUNED_REDUCTION_MEAN,
           "defaults");
    expect_refused(h, tuned_cross_entropy(h, logits, labels, logits, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "workspace", "mean without a workspace");
    o.reduction = TUNED_REDUCTION_SUM;
    o.label_smoothing = 1.5f;
    expect_refused(h, tuned_cross_entropy(h, logits, labels, logits, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "label_smoothing", "smoothing past 1");
    o.label_smoothing = 0.0f;
    o.z_out = (float *)(logits + 512); /* inside the logits */
    expect_refused(h, tuned_cross_entropy(h, logits, labels, logits, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "z_out", "z_out inside the logits");
    o.z_out = NULL;
    expect_refused(h, tuned_cross_entropy(h, logits, NULL, logits, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "labels is NULL", "NULL labels");
    /* the gradient over the logits is allowed only as the very same memory */
    expect_refused(h, tuned_cross_entropy(h, logits, labels, logits + 2, loss, lse, rows, cols,
                                          cols, TUNED_BF16, &o, NULL),
                   "overlap", "a gradient 2 bytes into the logits");
    /* int32 labels take 4 bytes a row: loss right after them is clear, at
     * 8 bytes a row it would not be */
    o.labels_int32 = 1;
    float *after = (float *)(labels + rows * 4);
    rc = tuned_cross_entropy(h, logits, labels, logits, after, lse, rows, cols, cols, TUNED_BF16,
                             &o, NULL);
    EXPECT(rc != TUNED_EINVAL || strstr(tuned_last_error(h), "overlap") == NULL,
           "int32 labels sized as int64: %s", tuned_last_error(h));
    o.labels_int32 = 0;
    expect_refused(h, tuned_cross_entropy(h, logits, labels, logits, after, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "overlap", "int64 labels and the loss right after 4 bytes a row");
    expect_refused(h, tuned_cross_entropy_rescale(h, logits, rows, cols, cols, TUNED_BF16, NULL,
                                                  NULL),
                   "factor is NULL", "rescale without a factor");
    /* a slice of the classes: the backward's alone, and inside the rows */
    o.class_offset = 1000;
    o.classes = 4000;
    expect_refused(h, tuned_cross_entropy(h, logits, labels, logits, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "the backward's", "a forward over a slice of the classes");
    float *saved = (float *)0xc00000;
    o.class_offset = 3500;
    expect_refused(h, tuned_cross_entropy_backward(h, logits, labels, saved, logits, rows, cols,
                                                   cols, TUNED_BF16, &o, NULL),
                   "not a slice", "a slice past the rows' end");
    o.class_offset = -1;
    expect_refused(h, tuned_cross_entropy_backward(h, logits, labels, saved, logits, rows, cols,
                                                   cols, TUNED_BF16, &o, NULL),
                   "not a slice", "a negative class_offset");
    o.class_offset = 8;
    o.classes = 0;
    expect_refused(h, tuned_cross_entropy_backward(h, logits, labels, saved, logits, rows, cols,
                                                   cols, TUNED_BF16, &o, NULL),
                   "not a slice", "an offset without the classes");
    o.class_offset = 0;
    o.classes = (int64_t)1 << 31;
    expect_refused(h, tuned_cross_entropy_backward(h, logits, labels, saved, logits, rows, cols,
                                                   cols, TUNED_BF16, &o, NULL),
                   "not a slice", "2^31 classes");
    o.classes = 0;
    /* the reduced loss: a forward's, of sum or mean, aligned, clear of the rest */
    float *total = (float *)0xd00000;
    o.total = total;
    expect_refused(h, tuned_cross_entropy_backward(h, logits, labels, saved, logits, rows, cols,
                                                   cols, TUNED_BF16, &o, NULL),
                   "total is the forward's", "a backward with a total");
    o.reduction = TUNED_REDUCTION_NONE;
    expect_refused(h, tuned_cross_entropy(h, logits, labels, NULL, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "reduction none has none", "a total with reduction none");
    o.reduction = TUNED_REDUCTION_SUM;
    o.total = (float *)(labels + 2);
    expect_refused(h, tuned_cross_entropy(h, logits, labels, NULL, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "4-byte aligned", "a misaligned total");
    o.total = loss + 3;
    expect_refused(h, tuned_cross_entropy(h, logits, labels, NULL, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "overlap", "a total inside the loss");
    /* the buffers the kernels write lie clear of each other too */
    o.total = total;
    o.error = (uint32_t *)total;
    expect_refused(h, tuned_cross_entropy(h, logits, labels, NULL, loss, lse, rows, cols, cols,
                                          TUNED_BF16, &o, NULL),
                   "overlap", "a total over the error word");
    o.error = NULL;
    tuned_close(h);
}

/* ---- the router's argument checks (nothing is launched) ---- */

static void test_router_args(void)
{
    tuned_handle *h = NULL;
    int rc = open_handle(&h, TUNED_POLICY_NEVER, NULL, NULL);
    EXPECT(rc == 0, "open: %s", tuned_last_error(NULL));
    if (rc != 0)
        return;
    char *logits = (char *)0x100000;
    float *weights = (float *)0x900000;
    char *ids = (char *)0xa00000;
    const long long rows = 64;
    tuned_router_options o;
    tuned_router_options_init(&o);
    EXPECT(o.k == 8 && o.score == TUNED_ROUTER_SOFTMAX && o.num_groups == 1 &&
               o.topk_group == 1 && o.scaling == 1.0f && !o.ids_int32 && !o.weights_bf16 &&
               o.source_rows == NULL,
           "defaults");
    static const struct {
        int k, score, groups, kept;
        float scaling;
        long long experts;
        const char *says;
    } bad[] = {
        {0, 0, 1, 1, 1.0f, 128, "k 0 (1 to 64)"},
        {65, 0, 1, 1, 1.0f, 128, "k 65 (1 to 64)"},
        {9, 0, 1, 1, 1.0f, 8, "k 9 is more than the 8 experts"},
        {8, 0, 1, 1, 1.0f, 4096, "4096 experts (2 to 2048)"},
        {8, 0, 7, 1, 1.0f, 128, "7 groups do not divide 128 experts"},
        {8, 0, 4, 5, 1.0f, 128, "topk_group 5 is more than the 4 groups"},
        {40, 0, 8, 2, 1.0f, 128, "kept groups"},
        {8, 3, 1, 1, 1.0f, 128, "score 3"},
        {8, 0, 1, 1, 0.0f, 128, "scaling 0"},
        {8, 0, 1, 1, 1.0f / 0.0f, 128, "scaling inf"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.k = bad[i].k, o.score = (tuned_router_score)bad[i].score;
        o.num_groups = bad[i].groups, o.topk_group = bad[i].kept, o.scaling = bad[i].scaling;
        expect_refused(h, tuned_router_topk(h, logits, NULL, weights, ids, NULL, rows,
                                            bad[i].experts, bad[i].experts, TUNED_FP32, &o, NULL),
                       bad[i].says, bad[i].says);
    }
    tuned_router_options_init(&o);
    expect_refused(h, tuned_router_topk(h, logits, NULL, NULL, ids, NULL, rows, 128, 128,
                                        TUNED_FP32, &o, NULL),
                   "weights is NULL", "NULL weights");
    /* weights (64 x 8 fp32) and ids overlapping by one element */
    expect_refused(h, tuned_router_topk(h, logits, NULL, weights, (char *)weights + 2040, NULL,
                                        rows, 128, 128, TUNED_FP32, &o, NULL),
                   "overlap", "weights and ids overlapping");
    /* int32 ids take 4 bytes an id: right after them the counts are clear;
     * at int64's 8 they would overlap */
    int *counts = (int *)(ids + rows * 8 * 4);
    o.ids_int32 = 1;
    rc = tuned_router_topk(h, logits, NULL, weights, ids, counts, rows, 128, 128, TUNED_FP32, &o,
                           NULL);
    EXPECT(rc != TUNED_EINVAL || strstr(tuned_last_error(h), "overlap") == NULL,
           "int32 ids sized as int64: %s", tuned_last_error(h));
    o.ids_int32 = 0;
    expect_refused(h, tuned_router_topk(h, logits, NULL, weights, ids, counts, rows, 128, 128,
                                        TUNED_FP32, &o, NULL),
                   "overlap", "int64 ids and counts after 4 bytes an id");
    /* bf16 weights take 2 bytes a weight: ids right after them are clear;
     * fp32 weights would overlap them */
    o.weights_bf16 = 1;
    rc = tuned_router_topk(h, logits, NULL, weights, (char *)weights + rows * 8 * 2, NULL, rows,
                           128, 128, TUNED_FP32, &o, NULL);
    EXPECT(rc != TUNED_EINVAL || strstr(tuned_last_error(h), "overlap") == NULL,
           "bf16 weights sized as fp32: %s", tuned_last_error(h));
    o.weights_bf16 = 0;
    expect_refused(h, tuned_router_topk(h, logits, NULL, weights, (char *)weights + rows * 8 * 2,
                                        NULL, rows, 128, 128, TUNED_FP32, &o, NULL),
                   "overlap", "fp32 weights and ids after 2 bytes a weight");
    /* the source rows: an output like the others, int32, rows x k */
    o.source_rows = (int32_t *)(weights + 4);
    expect_refused(h, tuned_router_topk(h, logits, NULL, weights, ids, NULL, rows, 128, 128,
                                        TUNED_FP32, &o, NULL),
                   "overlap", "source rows inside the weights");
    o.source_rows = (int32_t *)(ids + (1 << 20) + 2);
    expect_refused(h, tuned_router_topk(h, logits, NULL, weights, ids, NULL, rows, 128, 128,
                                        TUNED_FP32, &o, NULL),
                   "source_rows", "unaligned source rows");
    o.source_rows = (int32_t *)(ids + (1 << 20));
    expect_refused(h, tuned_router_topk(h, logits, NULL, weights, ids, NULL, (1ll << 28) + 1, 128,
                                        128, TUNED_FP32, &o, NULL),
                   "past 2^31", "source rows of 2^28 + 1 rows x 8");
    /* the same through tuned_run, the kind's six tensors (its default k 8) */
    {
        const void *tensors[] = {logits, NULL, weights, ids, NULL, o.source_rows};
        expect_refused(h, tuned_run(h, TUNED_KERNEL_ROUTER_TOPK, tensors, (1ll << 28) + 1, 128,
                                    128, TUNED_FP32, 1.0f, NULL),
                       "past 2^31", "tuned_run's source rows of 2^28 + 1 rows x 8");
    }
    /* the backward ignores the forward's outputs' options */
    o.weights_bf16 = 1;
    expect_refused(h, tuned_router_topk_backward(h, logits, ids, NULL, logits, rows, 128, 128,
                                                 TUNED_FP32, &o, NULL),
                   "dweights is NULL", "backward without dweights");
    tuned_router_options_init(&o);
    expect_refused(NULL, tuned_router_topk(NULL, logits, NULL, weights, ids, NULL, rows, 128, 128,
                                           TUNED_FP32, &o, NULL),
                   "handle is NULL", "NULL handle");
    tuned_close(h);
}

int main(void)
{
    signal(SIGALRM, watchdog);
    alarm(90);
    /* The driver the library will load must be the stand-in. */
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *sym = cuda != NULL ? dlsym(cuda, "stub_cuda_allocs") : NULL;
    if (sym == NULL) {
        fprintf(stderr, "test_api_stub: libcuda.so.1 is not the test stand-in (run it from "
                        "meson, which puts tests/stub_cuda first on LD_LIBRARY_PATH)\n");
        return 1;
    }
    memcpy(&stub_allocs, &sym, sizeof sym);
    tuned__nvrtc *n = NULL;
    if (tuned__nvrtc_load(&n, NULL) != 0) {
        printf("api-stub: skipped, no NVRTC\n");
        return TEST_SKIP;
    }
    tuned__nvrtc_unload(n);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tuned-test-api-stub-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    write_script();
    test_space();
    test_callback();
    test_cross_entropy_args();
    test_router_args();
    return expect_done("api stub", tmpdir);
}
