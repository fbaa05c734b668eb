/* overhead.c: host cost of one tuned_softmax call against a raw
 * cuLaunchKernel of the same kernel.
 *
 *   bench_overhead [--shape RxC] [--dtype D] [--batch N] [--reps N] [--store PATH] [--json]
 *
 * Links the installed-style shared libtuned (public API only) and loads the
 * driver with dlopen, as an application would. The kernel is the one
 * tuned_prepare picks (its CUfunction, grid, block and shared memory from
 * tuned_last_choice), so both sides launch exactly the same thing:
 *
 *   eager     the host time of BATCH launches on a stream (then one
 *             synchronize, not timed), per launch; tuned and raw batches
 *             interleaved, the median over REPS batches of each
 *   captured  the same while the stream is being captured into a CUDA
 *             graph (what each call costs at capture time); each graph is
 *             then instantiated and replayed, and the GPU time per kernel
 *             of the replay is reported too (equal by construction)
 *
 * Prints a table, or one JSON object with --json. Exit status 0 when the
 * tuned side is within 1 us of the raw one in both modes, 1 when not, 77
 * without a GPU. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#include "tuned.h"

#define SKIP 77
#define MAX_REPS 1000

static struct {
    __typeof__(&cuInit) init;
    __typeof__(&cuDeviceGet) device_get;
    __typeof__(&cuDevicePrimaryCtxRetain) retain;
    __typeof__(&cuCtxSetCurrent) set_current;
    __typeof__(&cuMemAlloc) alloc;
    __typeof__(&cuMemFree) free_;
    __typeof__(&cuMemsetD8) memset8;
    __typeof__(&cuStreamCreate) stream_create;
    __typeof__(&cuStreamSynchronize) stream_sync;
    __typeof__(&cuLaunchKernel) launch;
    __typeof__(&cuStreamBeginCapture) begin_capture;
    __typeof__(&cuStreamEndCapture) end_capture;
    __typeof__(&cuGraphInstantiateWithFlags) instantiate;
    __typeof__(&cuGraphLaunch) graph_launch;
    __typeof__(&cuGraphDestroy) graph_destroy;
    __typeof__(&cuGraphExecDestroy) exec_destroy;
    __typeof__(&cuEventCreate) event_create;
    __typeof__(&cuEventRecord) event_record;
    __typeof__(&cuEventSynchronize) event_sync;
    __typeof__(&cuEventElapsedTime) elapsed;
} cu;

static void *load(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "bench_overhead: libcuda.so.1 has no %s\n", name);
        exit(1);
    }
    return p;
}

#define LOAD(field, name) memcpy(&cu.field, &(void *){load(lib, name)}, sizeof(void *))

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define CHECK(call)                                                                             \
    do {                                                                                        \
        CUresult r_ = (call);                                                                   \
        if (r_ != CUDA_SUCCESS) {                                                               \
            fprintf(stderr, "bench_overhead: %s: CUDA error %d\n", #call, (int)r_);             \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

typedef struct run {
    tuned_handle *h;
    CUdeviceptr x, y;
    long long rows, stride;
    int cols;
    tuned_dtype dtype;
    tuned_choice c;
    CUstream s;
} run;

static void launch_batch(run *r, bool tuned, int batch)
{
    if (tuned) {
        for (int i = 0; i < batch; i++)
            if (tuned_softmax(r->h, (void *)(uintptr_t)r->x, (void *)(uintptr_t)r->y, r->rows,
                              r->cols, r->stride, r->dtype, r->s) != 0) {
                fprintf(stderr, "bench_overhead: %s\n", tuned_last_error(r->h));
                exit(1);
            }
    } else {
        /* The forward kernels' parameters, as tuned.h gives them; scale 1
         * is what tuned_softmax passes. */
        float scale = 1.0f;
        void *args[] = {&r->x, &r->y, &r->rows, &r->cols, &r->stride, &scale};
        for (int i = 0; i < batch; i++)
            CHECK(cu.launch((CUfunction)r->c.function, r->c.grid, 1, 1, r->c.block, 1, 1,
                            r->c.smem, r->s, args, NULL));
    }
}

/* Host us per launch, eager. */
static double eager(run *r, bool tuned, int batch)
{
    CHECK(cu.stream_sync(r->s));
    double t0 = now_us();
    launch_batch(r, tuned, batch);
    double t1 = now_us();
    CHECK(cu.stream_sync(r->s));
    return (t1 - t0) / batch;
}

/* Host us per launch while capturing; *kernel_us: GPU us per kernel when
 * the captured graph is replayed. */
static double captured(run *r, bool tuned, int batch, double *kernel_us)
{
    CHECK(cu.stream_sync(r->s));
    CHECK(cu.begin_capture(r->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    double t0 = now_us();
    launch_batch(r, tuned, batch);
    double t1 = now_us();
    CUgraph g;
    CUgraphExec ge;
    CHECK(cu.end_capture(r->s, &g));
    CHECK(cu.instantiate(&ge, g, 0));
    CUevent a, b;
    CHECK(cu.event_create(&a, CU_EVENT_DEFAULT));
    CHECK(cu.event_create(&b, CU_EVENT_DEFAULT));
    CHECK(cu.graph_launch(ge, r->s)); /* warm */
    CHECK(cu.event_record(a, r->s));
    CHECK(cu.graph_launch(ge, r->s));
    CHECK(cu.event_record(b, r->s));
    CHECK(cu.event_sync(b));
    float ms = 0;
    CHECK(cu.elapsed(&ms, a, b));
    *kernel_us = ms * 1e3 / batch;
    CHECK(cu.exec_destroy(ge));
    CHECK(cu.graph_destroy(g));
    return (t1 - t0) / batch;
}

int main(int argc, char **argv)
{
    long long rows = 32, cols = 128;
    int batch = 200, reps = 51;
    bool json = false;
    tuned_dtype dtype = TUNED_FP16;
    tuned_options o;
    tuned_options_init(&o);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc &&
            sscanf(argv[++i], "%lldx%lld", &rows, &cols) == 2)
            continue;
        if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc && tuned_dtype_parse(argv[++i], &dtype) == 0)
            continue;
        if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc && (batch = atoi(argv[++i])) > 0)
            continue;
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && (reps = atoi(argv[++i])) > 0 &&
            reps <= MAX_REPS)
            continue;
        if (strcmp(argv[i], "--store") == 0 && i + 1 < argc) {
            o.store = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
            continue;
        }
        fprintf(stderr, "usage: bench_overhead [--shape RxC] [--dtype D] [--batch N] [--reps N] "
                        "[--store PATH] [--json]\n");
        return 2;
    }
    run r = {.rows = rows, .stride = cols, .cols = (int)cols, .dtype = dtype};
    int rc = tuned_open(&r.h, &o);
    if (rc == TUNED_ENODRIVER || rc == TUNED_ENODEV) {
        printf("SKIP: %s\n", tuned_last_error(NULL));
        return SKIP;
    }
    if (rc != 0) {
        fprintf(stderr, "bench_overhead: %s\n", tuned_last_error(NULL));
        return 1;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "bench_overhead: %s\n", dlerror());
        return 1;
    }
    LOAD(init, "cuInit");
    LOAD(device_get, "cuDeviceGet");
    LOAD(retain, "cuDevicePrimaryCtxRetain");
    LOAD(set_current, "cuCtxSetCurrent");
    LOAD(alloc, "cuMemAlloc_v2");
    LOAD(free_, "cuMemFree_v2");
    LOAD(memset8, "cuMemsetD8_v2");
    LOAD(stream_create, "cuStreamCreate");
    LOAD(stream_sync, "cuStreamSynchronize");
    LOAD(launch, "cuLaunchKernel");
    LOAD(begin_capture, "cuStreamBeginCapture_v2");
    LOAD(end_capture, "cuStreamEndCapture");
    LOAD(instantiate, "cuGraphInstantiateWithFlags");
    LOAD(graph_launch, "cuGraphLaunch");
    LOAD(graph_destroy, "cuGraphDestroy");
    LOAD(exec_destroy, "cuGraphExecDestroy");
    LOAD(event_create, "cuEventCreate");
    LOAD(event_record, "cuEventRecord");
    LOAD(event_sync, "cuEventSynchronize");
    LOAD(elapsed, "cuEventElapsedTime"); /* v1: every driver has it */
    CUdevice dev;
    CUcontext ctx;
    CHECK(cu.init(0));
    CHECK(cu.device_get(&dev, 0));
    CHECK(cu.retain(&ctx, dev));
    CHECK(cu.set_current(ctx));
    size_t bytes = (size_t)rows * (size_t)cols * tuned_dtype_size(dtype);
    CHECK(cu.alloc(&r.x, bytes));
    CHECK(cu.alloc(&r.y, bytes));
    CHECK(cu.memset8(r.x, 0, bytes));
    CHECK(cu.stream_create(&r.s, CU_STREAM_NON_BLOCKING));
    const void *tensors[] = {(void *)(uintptr_t)r.x, (void *)(uintptr_t)r.y};
    if (tuned_prepare(r.h, TUNED_KERNEL_SOFTMAX, tensors, rows, cols, cols, dtype, &r.c) != 0) {
        fprintf(stderr, "bench_overhead: %s\n", tuned_last_error(r.h));
        return 1;
    }
    if (r.c.cooperative) {
        /* Its workspace and ticket are tuned_softmax's own: no raw launch
         * to compare with. */
        fprintf(stderr, "bench_overhead: %s is a grid split (a cooperative launch); pick a shape "
                        "whose config is not\n", r.c.config);
        return 1;
    }
    /* Warm both paths (and the driver's own caches). */
    for (int i = 0; i < 3; i++) {
        eager(&r, true, batch);
        eager(&r, false, batch);
    }
    double *et = calloc((size_t)reps, sizeof(double)), *er = calloc((size_t)reps, sizeof(double));
    double *ct = calloc((size_t)reps, sizeof(double)), *cr = calloc((size_t)reps, sizeof(double));
    double *kt = calloc((size_t)reps, sizeof(double)), *kr = calloc((size_t)reps, sizeof(double));
    for (int i = 0; i < reps; i++) {
        et[i] = eager(&r, true, batch);
        er[i] = eager(&r, false, batch);
    }
    for (int i = 0; i < reps; i++) {
        ct[i] = captured(&r, true, batch, &kt[i]);
        cr[i] = captured(&r, false, batch, &kr[i]);
    }
    double m_et = median(et, reps), m_er = median(er, reps), m_ct = median(ct, reps),
           m_cr = median(cr, reps), m_kt = median(kt, reps), m_kr = median(kr, reps);
    bool ok = m_et - m_er < 1.0 && m_ct - m_cr < 1.0;
    if (json) {
        printf("{\"shape\":\"%lldx%lld\",\"dtype\":\"%s\",\"config\":\"%s\",\"source\":\"%s\","
               "\"batch\":%d,\"reps\":%d,\"eager_tuned_us\":%.3f,\"eager_raw_us\":%.3f,"
               "\"capture_tuned_us\":%.3f,\"capture_raw_us\":%.3f,\"graph_kernel_tuned_us\":%.3f,"
               "\"graph_kernel_raw_us\":%.3f,\"within_1us\":%s}\n",
               rows, cols, tuned_dtype_name(dtype), r.c.config, tuned_source_name(r.c.source),
               batch, reps, m_et, m_er, m_ct, m_cr, m_kt, m_kr, ok ? "true" : "false");
    } else {
        printf("host time per launch, %lldx%lld %s, %s (%s); median of %d batches of %d\n", rows,
               cols, tuned_dtype_name(dtype), r.c.config, tuned_source_name(r.c.source), reps,
               batch);
        printf("%-26s %10s %10s %10s\n", "", "tuned us", "raw us", "overhead");
        printf("%-26s %10.3f %10.3f %+10.3f\n", "eager", m_et, m_er, m_et - m_er);
        printf("%-26s %10.3f %10.3f %+10.3f\n", "while capturing a graph", m_ct, m_cr,
               m_ct - m_cr);
        printf("%-26s %10.3f %10.3f %+10.3f\n", "graph replay, GPU/kernel", m_kt, m_kr,
               m_kt - m_kr);
        printf("%s: tuned_softmax within 1 us of a raw cuLaunchKernel\n", ok ? "PASS" : "FAIL");
    }
    free(et);
    free(er);
    free(ct);
    free(cr);
    free(kt);
    free(kr);
    cu.free_(r.x);
    cu.free_(r.y);
    tuned_close(r.h);
    return ok ? 0 : 1;
}
