/* test_api_gpu.c TUNED: the embedding API on a real GPU (issue 6).
 *
 *   correctness  tuned_softmax against a CPU float64 softmax for every dtype
 *                and a matrix of shapes, with dense rows, strided rows (the
 *                gaps between rows must stay untouched) and misaligned x / y;
 *                the guard bytes after the output untouched
 *   sources      default (empty store), nearest and exact (records written
 *                before the handle opens, under this GPU's identity)
 *   fast path    repeated calls reuse the entry; host time per call printed
 *   threads      8 threads on their own streams and buffers, one handle
 *   contexts     a thread with no current context: x's context is adopted
 *   graphs       grid splits captured into a CUDA graph, replayed on new
 *                inputs
 *   errors       misaligned, overlapping, bad stride: TUNED_EINVAL + message
 *   tunes        tuned_tune (a child `tuned` process, the path in argv[1])
 *                switches the shape to exact; a second handle on the same
 *                store with TUNED_POLICY_PROCESS tunes a shape in the
 *                background and its calls switch to exact by themselves
 *
 * Exits 77 (skipped) where no CUDA driver or GPU is found. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tuned.h"
#include "src/driver/driver.h"
#include "src/driver/gpu.h"
#include "src/tuner/tune.h"

#define SKIP 77
#define GUARD 4096
#define POISON 0x7B

#define EXPECT_ATOMIC /* EXPECT runs in several threads */
#include "tests/expect.h"

static tuned__driver *d;
static CUcontext ctx;

/* ---- host-side element conversions ---- */

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        int shift = 14 - e;
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++;
    return (uint16_t)half;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000 | (man << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t r = x + 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(r >> 16);
}

static float bf16_to_f32(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void put_elem(unsigned char *p, tuned_dtype dt, float v)
{
    if (dt == TUNED_FP32) {
        memcpy(p, &v, 4);
    } else {
        uint16_t h = dt == TUNED_FP16 ? f32_to_f16(v) : f32_to_bf16(v);
        memcpy(p, &h, 2);
    }
}

static double get_elem(const unsigned char *p, tuned_dtype dt)
{
    if (dt == TUNED_FP32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return dt == TUNED_FP16 ? f16_to_f32(h) : bf16_to_f32(h);
}

static _Thread_local uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 16.0 - 8.0);
}

/* ---- one checked call ---- */

typedef struct call_case {
    tuned_dtype dtype;
    int64_t rows, cols, stride;
    size_t x_off, y_off; /* elements */
} call_case;

typedef struct device_buf {
    CUdeviceptr x_alloc, y_alloc;
    size_t x_bytes, y_bytes;
} device_buf;

/* cuMemAlloc, checked: a failure says why, with the device's free memory
 * (an allocation that fails while other tests share the GPU is told apart
 * from a context an earlier kernel killed). */
static bool dev_alloc(CUdeviceptr *p, size_t bytes)
{
    tuned__err e = {0};
    if (tuned__cuda_check(d, d->cuMemAlloc(p, bytes), &e, "cuMemAlloc") == 0)
        return true;
    size_t free_b = 0, total_b = 0;
    CUresult mr = d->cuMemGetInfo(&free_b, &total_b);
    EXPECT(0, "%zu bytes: %s (%zu of %zu MiB free%s)", bytes, e.msg, free_b >> 20, total_b >> 20,
           mr == CUDA_SUCCESS ? "" : ", unknown");
    *p = 0;
    return false;
}

/* The stream's work finished; else says what failed, with the driver's
 * error (a sticky one means the context is lost). */
static bool stream_done(CUstream stream, const char *what)
{
    tuned__err e = {0};
    if (tuned__cuda_check(d, d->cuStreamSynchronize(stream), &e, what) == 0)
        return true;
    EXPECT(0, "%s", e.msg);
    return false;
}

/* A case's input and output, on the device (0: none) and on the host. */
static void free_case_buffers(CUdeviceptr x, CUdeviceptr y, void *hx, void *hy)
{
    if (x)
        d->cuMemFree(x);
    if (y)
        d->cuMemFree(y);
    free(hx);
    free(hy);
}

/* The elements of hy (c's output, y_bytes with the guard) that differ from
 * a CPU float64 softmax of hx, and the bytes written outside the rows;
 * prints the first three. */
static size_t count_wrong(const call_case *c, const unsigned char *hx, const unsigned char *hy,
                          size_t y_bytes)
{
    size_t es = tuned_dtype_size(c->dtype);
    size_t span = (size_t)((c->rows - 1) * c->stride + c->cols);
    double rtol = c->dtype == TUNED_FP16 ? 2e-3 : c->dtype == TUNED_BF16 ? 1e-2 : 2e-5;
    size_t bad = 0;
    for (int64_t r = 0; r < c->rows; r++) {
        const unsigned char *xr = hx + (c->x_off + (size_t)(r * c->stride)) * es;
        const unsigned char *yr = hy + (c->y_off + (size_t)(r * c->stride)) * es;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < c->cols; j++)
            m = fmax(m, get_elem(xr + j * es, c->dtype));
        for (int64_t j = 0; j < c->cols; j++)
            sum += exp(get_elem(xr + j * es, c->dtype) - m);
        for (int64_t j = 0; j < c->cols; j++) {
            double want = exp(get_elem(xr + j * es, c->dtype) - m) / sum;
            double have = get_elem(yr + j * es, c->dtype);
            if (!(fabs(have - want) <= 1e-6 + rtol * want) && bad++ < 3)
                fprintf(stderr, "  row %lld col %lld: %g, want %g\n", (long long)r, (long long)j,
                        have, want);
        }
        /* The gap after the row (strided layouts) stays untouched. */
        for (size_t b = (size_t)c->cols * es; r + 1 < c->rows && b < (size_t)c->stride * es; b++)
            if (yr[b] != POISON && bad++ < 3)
                fprintf(stderr, "  row %lld: a write into the gap\n", (long long)r);
    }
    for (size_t b = (c->y_off + span) * es; b < y_bytes; b++)
        if (hy[b] != POISON && bad++ < 3)
            fprintf(stderr, "  a write past the output\n");
    return bad;
}

/* Runs c on stream through h and checks it; returns 0 when it ran. */
static int run_case(tuned_handle *h, const call_case *c, CUstream stream, tuned_choice *choice,
                    bool quiet)
{
    size_t es = tuned_dtype_size(c->dtype);
    size_t span = (size_t)((c->rows - 1) * c->stride + c->cols);
    size_t x_bytes = (span + c->x_off) * es, y_bytes = (span + c->y_off) * es + GUARD;
    unsigned char *hx = malloc(x_bytes), *hy = malloc(y_bytes);
    memset(hx, 0, x_bytes);
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t j = 0; j < c->cols; j++)
            put_elem(hx + (c->x_off + (size_t)(r * c->stride + j)) * es, c->dtype, rnd());
    CUdeviceptr xa = 0, ya = 0;
    int rc = 1;
    if (!dev_alloc(&xa, x_bytes) || !dev_alloc(&ya, y_bytes))
        goto out;
    d->cuMemcpyHtoD(xa, hx, x_bytes);
    /* From pageable memory cuMemcpyHtoD may return before its DMA (on the
     * legacy stream) lands, and a non-blocking stream does not wait for
     * it: without this the kernel can read the previous owner's bytes
     * (seen on the H200 with 8 threads: rows of another input's softmax). */
    d->cuCtxSynchronize();
    d->cuMemsetD8Async(ya, POISON, y_bytes, stream);
    const void *x = (const void *)(uintptr_t)(xa + c->x_off * es);
    void *y = (void *)(uintptr_t)(ya + c->y_off * es);
    int got = tuned_softmax(h, x, y, c->rows, c->cols, c->stride, c->dtype, stream);
    EXPECT(got == 0, "%s %lldx%lld stride %lld offsets %zu/%zu: %s", tuned_dtype_name(c->dtype),
           (long long)c->rows, (long long)c->cols, (long long)c->stride, c->x_off, c->y_off,
           tuned_last_error(h));
    if (got != 0)
        goto out;
    if (choice != NULL)
        EXPECT(tuned_last_choice(h, choice) == 0, "last choice: %s", tuned_last_error(h));
    char label[160];
    snprintf(label, sizeof label, "%s %lldx%lld: the kernel %s", tuned_dtype_name(c->dtype),
             (long long)c->rows, (long long)c->cols, choice ? choice->config : "");
    stream_done(stream, label);
    d->cuMemcpyDtoH(hy, ya, y_bytes);
    size_t bad = count_wrong(c, hx, hy, y_bytes);
    EXPECT(bad == 0, "%s %lldx%lld stride %lld offsets %zu/%zu (%s): %zu wrong",
           tuned_dtype_name(c->dtype), (long long)c->rows, (long long)c->cols,
           (long long)c->stride, c->x_off, c->y_off, choice ? choice->config : "?", bad);
    if (!quiet && choice != NULL)
        printf("%-4s %6lldx%-6lld stride %-6lld off %zu/%zu  %-7s %-40s grid %u block %u\n",
               tuned_dtype_name(c->dtype), (long long)c->rows, (long long)c->cols,
               (long long)c->stride, c->x_off, c->y_off, tuned_source_name(choice->source),
               choice->config, choice->grid, choice->block);
    rc = 0;
out:
    free_case_buffers(xa, ya, hx, hy);
    return rc;
}

/* c (dense, no offsets) captured once into a CUDA graph on stream, then
 * replayed on new inputs, each replay's output checked: a kernel must not
 * keep state of its capture (a grid split's tags come from the GPU). The
 * shape's kernel must be loaded already: the capture keeps the current one. */
static void graph_case(tuned_handle *h, const call_case *c, CUstream stream)
{
    __typeof__(&cuStreamBeginCapture) begin;
    __typeof__(&cuStreamEndCapture) end;
    __typeof__(&cuGraphInstantiateWithFlags) instantiate;
    __typeof__(&cuGraphLaunch) launch;
    __typeof__(&cuGraphDestroy) destroy;
    __typeof__(&cuGraphExecDestroy) exec_destroy;
    /* POSIX's way from dlsym's void * to a function pointer. */
    *(void **)&begin = dlsym(d->lib, "cuStreamBeginCapture_v2");
    *(void **)&end = dlsym(d->lib, "cuStreamEndCapture");
    *(void **)&instantiate = dlsym(d->lib, "cuGraphInstantiateWithFlags");
    *(void **)&launch = dlsym(d->lib, "cuGraphLaunch");
    *(void **)&destroy = dlsym(d->lib, "cuGraphDestroy");
    *(void **)&exec_destroy = dlsym(d->lib, "cuGraphExecDestroy");
    if (!begin || !end || !instantiate || !launch || !destroy || !exec_destroy) {
        EXPECT(0, "the driver lacks the graph functions");
        return;
    }
    size_t es = tuned_dtype_size(c->dtype), n = (size_t)(c->rows * c->cols);
    size_t x_bytes = n * es, y_bytes = n * es + GUARD;
    unsigned char *hx = malloc(x_bytes), *hy = malloc(y_bytes);
    CUdeviceptr x = 0, y = 0;
    CUgraph g = NULL;
    CUgraphExec ge = NULL;
    if (hx == NULL || hy == NULL) {
        EXPECT(0, "graph %lldx%lld: host allocation", (long long)c->rows, (long long)c->cols);
        goto out;
    }
    if (!dev_alloc(&x, x_bytes) || !dev_alloc(&y, y_bytes))
        goto out;
    CUresult r = begin(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    int got = r == CUDA_SUCCESS ? tuned_softmax(h, (void *)(uintptr_t)x, (void *)(uintptr_t)y,
                                                c->rows, c->cols, c->cols, c->dtype, stream)
                                : -1;
    CUresult r2 = r == CUDA_SUCCESS ? end(stream, &g) : r;
    EXPECT(r == CUDA_SUCCESS && got == 0 && r2 == CUDA_SUCCESS &&
               instantiate(&ge, g, 0) == CUDA_SUCCESS,
           "graph %lldx%lld: capture (driver %d/%d, call: %s)", (long long)c->rows,
           (long long)c->cols, (int)r, (int)r2, got == 0 ? "ok" : tuned_last_error(h));
    if (ge == NULL)
        goto out;
    /* Each replay's input has its maximum somewhere else, and a scale of
     * its own, so a replay that combined an earlier one's (max, sum)
     * would be far off. */
    for (int replay = 0; replay < 4; replay++) {
        for (size_t i = 0; i < n; i++)
            put_elem(hx + i * es, c->dtype, rnd() * (float)(replay + 1) * 0.25f);
        for (int64_t row = 0; row < c->rows; row++)
            put_elem(hx + ((size_t)row * (size_t)c->cols +
                           (size_t)(replay * 7919 + row * 31) % (size_t)c->cols) * es,
                     c->dtype, 6.0f + (float)replay);
        d->cuMemcpyHtoD(x, hx, x_bytes);
        d->cuCtxSynchronize();
        d->cuMemsetD8Async(y, POISON, y_bytes, stream);
        EXPECT(launch(ge, stream) == CUDA_SUCCESS &&
                   d->cuStreamSynchronize(stream) == CUDA_SUCCESS,
               "graph %lldx%lld: replay %d failed", (long long)c->rows, (long long)c->cols,
               replay);
        d->cuMemcpyDtoH(hy, y, y_bytes);
        size_t bad = count_wrong(c, hx, hy, y_bytes);
        EXPECT(bad == 0, "graph %s %lldx%lld: replay %d: %zu wrong", tuned_dtype_name(c->dtype),
               (long long)c->rows, (long long)c->cols, replay, bad);
    }
out:
    if (ge != NULL)
        exec_destroy(ge);
    if (g != NULL)
        destroy(g);
    free_case_buffers(x, y, hx, hy);
}

/* ---- the other kernels: scaled softmax, log_softmax and both backwards ---- */

/* Which kernel a tensor of kernels_case holds, for messages. */
static const char *const kernel_calls[] = {"tuned_softmax_scaled", "tuned_log_softmax",
                                          "tuned_softmax_backward",
                                          "tuned_log_softmax_backward"};

/* Runs the four calls on one shape (x and dy random, x_off elements into
 * their allocations, dy one more) and checks each against float64 on the
 * host: the forwards on scale * x, the backwards on the y the forwards
 * wrote (as the dtype holds it). Returns the wrong elements. */
static size_t kernels_case(tuned_handle *h, tuned_dtype dt, int64_t rows, int64_t cols,
                           int64_t stride, size_t x_off, float scale, CUstream stream)
{
    size_t es = tuned_dtype_size(dt);
    size_t span = (size_t)((rows - 1) * stride + cols);
    size_t bytes = (span + x_off + 1) * es + GUARD;
    /* x, dy, then the outputs: softmax, log_softmax, their gradients */
    unsigned char *host[6];
    CUdeviceptr dev[6] = {0};
    for (int i = 0; i < 6; i++) {
        host[i] = malloc(bytes);
        memset(host[i], 0, bytes);
        dev_alloc(&dev[i], bytes);
    }
    size_t off[6] = {x_off, x_off + 1, x_off, x_off, x_off, x_off};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            put_elem(host[0] + (off[0] + (size_t)(r * stride + j)) * es, dt, rnd());
            put_elem(host[1] + (off[1] + (size_t)(r * stride + j)) * es, dt, rnd() / 8);
        }
    d->cuMemcpyHtoD(dev[0], host[0], bytes);
    d->cuMemcpyHtoD(dev[1], host[1], bytes);
    d->cuCtxSynchronize(); /* see run_case */
    for (int i = 2; i < 6; i++)
        d->cuMemsetD8Async(dev[i], POISON, bytes, stream);
    void *ptr[6];
    for (int i = 0; i < 6; i++)
        ptr[i] = (void *)(uintptr_t)(dev[i] + off[i] * es);
    int rcs[4];
    rcs[0] = tuned_softmax_scaled(h, ptr[0], ptr[2], rows, cols, stride, dt, scale, stream);
    rcs[1] = tuned_log_softmax(h, ptr[0], ptr[3], rows, cols, stride, dt, scale, stream);
    rcs[2] = tuned_softmax_backward(h, ptr[2], ptr[1], ptr[4], rows, cols, stride, dt, stream);
    rcs[3] = tuned_log_softmax_backward(h, ptr[3], ptr[1], ptr[5], rows, cols, stride, dt, stream);
    for (int k = 0; k < 4; k++)
        EXPECT(rcs[k] == 0, "%s %s %lldx%lld: %s", kernel_calls[k], tuned_dtype_name(dt),
               (long long)rows, (long long)cols, tuned_last_error(h));
    stream_done(stream, "the four kernels");
    for (int i = 2; i < 6; i++)
        d->cuMemcpyDtoH(host[i], dev[i], bytes);
    double rtol = dt == TUNED_FP16 ? 2e-3 : dt == TUNED_BF16 ? 1e-2 : 2e-5;
    size_t bad[4] = {0};
    for (int64_t r = 0; r < rows; r++) {
        size_t row = (size_t)(r * stride);
#define AT(i, j) get_elem(host[i] + (off[i] + row + (size_t)(j)) * es, dt)
        double m = -INFINITY, sum = 0, dot = 0, mag = 0, gsum = 0, gmag = 0;
        for (int64_t j = 0; j < cols; j++)
            m = fmax(m, (double)scale * AT(0, j));
        for (int64_t j = 0; j < cols; j++)
            sum += exp((double)scale * AT(0, j) - m);
        for (int64_t j = 0; j < cols; j++) {
            dot += AT(1, j) * AT(2, j);
            mag += fabs(AT(1, j) * AT(2, j));
            gsum += AT(1, j);
            gmag += fabs(AT(1, j));
        }
        for (int64_t j = 0; j < cols; j++) {
            double v = (double)scale * AT(0, j) - m, g = AT(1, j), y = AT(2, j), ly = AT(3, j);
            double want[4] = {exp(v) / sum, v - log(sum), y * (g - dot), g - exp(ly) * gsum};
            double slack[4] = {1e-6, 1e-5, 1e-5 * fabs(y) * (fabs(g) + mag) + 1e-7,
                               1e-5 * (fabs(g) + exp(ly) * gmag) + 1e-7};
            for (int k = 0; k < 4; k++) {
                double have = AT(k + 2, j);
                if (!(fabs(have - want[k]) <= slack[k] + rtol * fabs(want[k])) && bad[k]++ < 3)
                    fprintf(stderr, "  %s row %lld col %lld: %g, want %g\n", kernel_calls[k],
                            (long long)r, (long long)j, have, want[k]);
            }
        }
#undef AT
    }
    /* Nothing written past any output. */
    for (int k = 0; k < 4; k++)
        for (size_t b = (off[k + 2] + span) * es; b < bytes; b++)
            if (host[k + 2][b] != POISON && bad[k]++ < 3)
                fprintf(stderr, "  %s: a write past the output\n", kernel_calls[k]);
    size_t total = 0;
    for (int k = 0; k < 4; k++) {
        EXPECT(bad[k] == 0, "%s %s %lldx%lld stride %lld offset %zu: %zu wrong", kernel_calls[k],
               tuned_dtype_name(dt), (long long)rows, (long long)cols, (long long)stride, x_off,
               bad[k]);
        total += bad[k];
    }
    for (int i = 0; i < 6; i++) {
        if (dev[i])
            d->cuMemFree(dev[i]);
        free(host[i]);
    }
    return total;
}

/* ---- threads ---- */

typedef struct worker {
    tuned_handle *h;
    int id;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    d->cuCtxSetCurrent(ctx);
    CUstream s;
    d->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    static const call_case cases[] = {{TUNED_FP16, 64, 1000, 1000, 0, 0},
                                      {TUNED_BF16, 33, 4097, 4097, 0, 0},
                                      {TUNED_FP32, 8, 32000, 32000, 0, 0},
                                      {TUNED_FP16, 300, 128, 128, 0, 0}};
    for (int i = 0; i < 40; i++)
        run_case(w->h, &cases[(i + w->id) % 4], s, NULL, true);
    d->cuStreamDestroy(s);
    return NULL;
}

/* A thread with no current context: the call adopts x's. */
static void *no_context_main(void *arg)
{
    tuned_handle *h = arg;
    CUcontext none = (CUcontext)0x1;
    d->cuCtxSetCurrent(NULL);
    d->cuCtxGetCurrent(&none);
    EXPECT(none == NULL, "the thread starts without a context");
    call_case c = {TUNED_FP16, 16, 1000, 1000, 0, 0};
    /* run_case allocates with cuMemAlloc, which needs a context: allocate
     * in the main context, then drop it, then call. */
    d->cuCtxSetCurrent(ctx);
    size_t bytes = 16 * 1000 * 2;
    CUdeviceptr x, y;
    d->cuMemAlloc(&x, bytes);
    d->cuMemAlloc(&y, bytes);
    d->cuMemsetD8Async(x, 0, bytes, NULL);
    d->cuCtxSynchronize();
    d->cuCtxSetCurrent(NULL);
    int rc = tuned_softmax(h, (void *)(uintptr_t)x, (void *)(uintptr_t)y, c.rows, c.cols,
                           c.stride, c.dtype, NULL);
    EXPECT(rc == 0, "no current context: %s", tuned_last_error(h));
    CUcontext now = NULL;
    d->cuCtxGetCurrent(&now);
    EXPECT(now == ctx, "x's context was made current");
    d->cuCtxSynchronize();
    d->cuMemFree(x);
    d->cuMemFree(y);
    return NULL;
}

/* ---- records written before the handle opens ---- */

static void put_kernel_record(tuned__store *s, const tuned__gpu *g, unsigned kernel,
                              tuned_dtype dt, uint64_t rows, uint64_t cols, const char *config)
{
    static tuned__tune_outcome o;
    memset(&o, 0, sizeof o);
    o.gpu = *g;
    o.copy_us = 10;
    o.search.best_us = 11;
    tuned__err e = {0};
    EXPECT(tuned__config_parse(config, &o.search.best, &e) == 0, "%s", e.msg);
    tuned__shape shape = {.dtype = dt, .rows = rows, .cols = cols, .kernel = (uint8_t)kernel};
    tuned__record rec;
    tuned__tune_record(&o, &shape, &rec);
    EXPECT(tuned__store_put_best(s, &rec, &e) == 0, "%s", e.msg);
}

static void put_record(tuned__store *s, const tuned__gpu *g, tuned_dtype dt, uint64_t rows,
                       uint64_t cols, const char *config)
{
    put_kernel_record(s, g, TUNED_KERNEL_SOFTMAX, dt, rows, cols, config);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *tuned_bin = argc > 1 ? argv[1] : "tuned";
    tuned__err e = {0};
    int rc = tuned__driver_load(&d, &e);
    if (rc == TUNED_ENODRIVER || rc == TUNED_ENODEV) {
        printf("SKIP: %s\n", e.msg);
        return SKIP;
    }
    tuned__nvrtc *n = NULL;
    tuned__gpu gpu;
    CUdevice dev;
    if (rc != 0 || tuned__nvrtc_load(&n, &e) != 0 || tuned__gpu_query(d, n, 0, &gpu, &e) != 0 ||
        tuned__cuda_check(d, d->cuDeviceGet(&dev, 0), &e, "device") != 0 ||
        tuned__cuda_check(d, d->cuDevicePrimaryCtxRetain(&ctx, dev), &e, "context") != 0 ||
        tuned__cuda_check(d, d->cuCtxSetCurrent(ctx), &e, "current") != 0) {
        fprintf(stderr, "FAIL: %s\n", e.msg);
        return 1;
    }
    printf("GPU: %s\n", gpu.identity);
    char dir[] = "/tmp/tuned-test-api-gpu-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 1;
    char store_path[128];
    snprintf(store_path, sizeof store_path, "%s/store", dir);

    /* Records under this GPU's identity: exact for 256x4096 fp32, and a
     * record of 128x4096 fp32 that is the nearest for 100x4096. */
    tuned__store *s = NULL;
    EXPECT(tuned__store_open(&s, store_path, 0, &e) == 0, "%s", e.msg);
    put_record(s, &gpu, TUNED_FP32, 256, 4096, "w8.r1.c1.m1.v4.ld=cs.st=cs.reg=f32");
    put_record(s, &gpu, TUNED_FP32, 128, 4096, "w4.r1.c1.m1.v4.ld=def.st=def.reg=f32");
    /* Rows split over the grid (64 and 96 blocks: any Hopper's SMs). */
    put_record(s, &gpu, TUNED_FP16, 1, 262144, "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g64");
    put_record(s, &gpu, TUNED_FP32, 24, 128256, "w8.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused.g4");
    /* and the backward kernels' rows (2 rows of 32 blocks) */
    put_kernel_record(s, &gpu, TUNED_KERNEL_SOFTMAX_BWD, TUNED_FP16, 2, 262144,
                      "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.g32");
    put_kernel_record(s, &gpu, TUNED_KERNEL_LOG_SOFTMAX_BWD, TUNED_FP16, 2, 262144,
                      "w8.r1.c1.m1.v8.ld=def.st=def.reg=pk.g32");
    /* Records of this GPU's hardware class under another driver: one that
     * is served as compatible after its check, one whose config does not
     * fit its shape (8-warp rows of 100 columns leave threads idle), which
     * is never served. */
    tuned__gpu other_driver = gpu;
    other_driver.driver_version += 10;
    tuned__gpu_identify(&other_driver);
    put_record(s, &other_driver, TUNED_FP32, 200, 4096, "w8.r1.c1.m1.v4.ld=cs.st=cs.reg=f32");
    put_record(s, &other_driver, TUNED_FP16, 200, 4096, "w4.r1.c1.m1.v8.ld=def.st=def.reg=pk");
    put_record(s, &other_driver, TUNED_FP32, 5, 100, "w32.r1.c1.m1.v4.ld=def.st=def.reg=f32");
    tuned__store_close(s);

    tuned_options o;
    tuned_options_init(&o);
    o.store = store_path;
    o.tuned_path = tuned_bin;
    tuned_handle *h = NULL;
    if (tuned_open(&h, &o) != 0) {
        fprintf(stderr, "FAIL: %s\n", tuned_last_error(NULL));
        return 1;
    }
    CUstream stream;
    d->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);

    /* Correctness over dtypes, shapes, strides and alignments. */
    static const int64_t shapes[][2] = {{1, 1},     {7, 100},    {64, 1000},   {333, 4097},
                                        {128, 32000}, {16, 50257}, {2, 262144}, {4096, 128}};
    tuned_choice ch;
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            call_case c = {(tuned_dtype)dt, shapes[i][0], shapes[i][1], shapes[i][1], 0, 0};
            /* bf16: nothing stored, default; fp16: the 1x262144 record and
             * the other driver's 200x4096 one are the nearest wherever
             * their config fits; fp32: the records of 4096 and 128256
             * columns likewise. */
            if (run_case(h, &c, stream, &ch, false) == 0)
                EXPECT((dt != TUNED_BF16 ? ch.source != TUNED_SOURCE_EXACT
                                         : ch.source == TUNED_SOURCE_DEFAULT) &&
                           ch.aligned == 1 && ch.function != NULL,
                       "dense %lldx%lld: %s aligned %d", (long long)c.rows, (long long)c.cols,
                       tuned_source_name(ch.source), ch.aligned);
            c.stride = c.cols + 5;
            if (run_case(h, &c, stream, &ch, false) == 0)
                EXPECT(ch.aligned == (((c.stride * (int64_t)tuned_dtype_size(c.dtype)) % 16) == 0),
                       "strided: aligned %d", ch.aligned);
            c.stride = c.cols;
            c.x_off = 1;
            c.y_off = 3;
            if (run_case(h, &c, stream, &ch, false) == 0)
                EXPECT(ch.aligned == 0, "misaligned rows compiled as aligned");
        }
    }

    /* The other kernels, through their calls: dense, strided, unaligned
     * (dy's offset inside a vector differing from y's), long rows. */
    {
        static const int64_t kshapes[][2] = {{7, 100}, {64, 1000}, {333, 4097}, {16, 50257},
                                             {2, 262144}};
        size_t wrong = 0, calls = 0;
        for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
            for (size_t i = 0; i < sizeof kshapes / sizeof kshapes[0]; i++) {
                int64_t r = kshapes[i][0], c = kshapes[i][1];
                wrong += kernels_case(h, (tuned_dtype)dt, r, c, c, 0, 0.5f, stream);
                wrong += kernels_case(h, (tuned_dtype)dt, r, c, c + 3, 0, 1.0f, stream);
                wrong += kernels_case(h, (tuned_dtype)dt, r, c, c, 1, 2.0f, stream);
                calls += 12;
            }
        /* The backward grid splits stored above serve their shape. */
        {
            size_t bwd_bytes = 2 * 262144 * 2;
            /* A failed allocation is reported; the calls then refuse its NULL. */
            CUdeviceptr yb = 0, dyb = 0, dxb = 0;
            dev_alloc(&yb, bwd_bytes);
            dev_alloc(&dyb, bwd_bytes);
            dev_alloc(&dxb, bwd_bytes);
            d->cuMemsetD8(yb, 0, bwd_bytes);
            d->cuMemsetD8(dyb, 0, bwd_bytes);
            void *yp = (void *)(uintptr_t)yb, *dyp = (void *)(uintptr_t)dyb;
            void *dxp = (void *)(uintptr_t)dxb;
            for (int k = 0; k < 2; k++) {
                tuned_choice bc = {0};
                int brc = k == 0 ? tuned_softmax_backward(h, yp, dyp, dxp, 2, 262144, 262144,
                                                          TUNED_FP16, stream)
                                 : tuned_log_softmax_backward(h, yp, dyp, dxp, 2, 262144, 262144,
                                                              TUNED_FP16, stream);
                EXPECT(brc == 0 && tuned_last_choice(h, &bc) == 0 &&
                           bc.source == TUNED_SOURCE_EXACT && bc.cooperative == 1 &&
                           strstr(bc.config, ".g32") != NULL,
                       "%s 2x262144 fp16: %s %s (%s)", kernel_calls[k + 2],
                       tuned_source_name(bc.source), bc.config, tuned_last_error(h));
            }
            stream_done(stream, "the backward grid splits");
            d->cuMemFree(yb);
            d->cuMemFree(dyb);
            d->cuMemFree(dxb);
        }
        printf("kernels: %zu calls of softmax_scaled, log_softmax and both backwards checked, "
               "%zu wrong elements\n",
               calls, wrong);
        /* Their own arguments refused. */
        CUdeviceptr x;
        d->cuMemAlloc(&x, 1 << 20);
        char *p = (char *)(uintptr_t)x;
        EXPECT(tuned_softmax_scaled(h, p, p + 65536, 4, 100, 100, TUNED_FP16, 0.0f, stream) ==
                       TUNED_EINVAL &&
                   strstr(tuned_last_error(h), "scale") != NULL,
               "scale 0: %s", tuned_last_error(h));
        EXPECT(tuned_log_softmax(h, p, p + 65536, 4, 100, 100, TUNED_FP16, INFINITY, stream) ==
                   TUNED_EINVAL,
               "scale inf: %s", tuned_last_error(h));
        EXPECT(tuned_softmax_backward(h, p, p + 100, p + 65536, 4, 100, 100, TUNED_FP16, stream) ==
                   0,
               "y and dy may overlap: %s", tuned_last_error(h));
        EXPECT(tuned_softmax_backward(h, p, p + 65536, p + 65536 + 100, 4, 100, 100, TUNED_FP16,
                                      stream) == TUNED_EINVAL &&
                   strstr(tuned_last_error(h), "dy") != NULL &&
                   strstr(tuned_last_error(h), "overlap") != NULL,
               "dx over dy: %s", tuned_last_error(h));
        EXPECT(tuned_log_softmax_backward(h, p, NULL, p + 65536, 4, 100, 100, TUNED_FP16,
                                          stream) == TUNED_EINVAL &&
                   strstr(tuned_last_error(h), "dy is NULL") != NULL,
               "dy NULL: %s", tuned_last_error(h));
        d->cuStreamSynchronize(stream);
        d->cuMemFree(x);
    }

    /* Exact and nearest. */
    call_case exact = {TUNED_FP32, 256, 4096, 4096, 0, 0};
    if (run_case(h, &exact, stream, &ch, false) == 0)
        EXPECT(ch.source == TUNED_SOURCE_EXACT &&
                   strcmp(ch.config, "w8.r1.c1.m1.v4.ld=cs.st=cs.reg=f32") == 0 &&
                   ch.median_us == 11,
               "exact: %s %s", tuned_source_name(ch.source), ch.config);
    call_case near = {TUNED_FP32, 100, 4096, 4096, 0, 0};
    if (run_case(h, &near, stream, &ch, false) == 0)
        EXPECT(ch.source == TUNED_SOURCE_NEAREST && ch.record_rows == 128 &&
                   strcmp(ch.config, "w4.r1.c1.m1.v4.ld=def.st=def.reg=f32") == 0,
               "nearest: %s %s from %lld rows", tuned_source_name(ch.source), ch.config,
               (long long)ch.record_rows);
    /* Compatible: another driver's record of this shape, compiled here,
     * checked, served, and correct (run_case compares with the CPU); the
     * aligned and unaligned variants each checked. */
    call_case compat[] = {{TUNED_FP32, 200, 4096, 4096, 0, 0},
                          {TUNED_FP16, 200, 4096, 4096, 0, 0},
                          {TUNED_FP16, 200, 4096, 4096, 1, 3}};
    for (size_t i = 0; i < sizeof compat / sizeof compat[0]; i++)
        if (run_case(h, &compat[i], stream, &ch, false) == 0)
            EXPECT(ch.source == TUNED_SOURCE_COMPATIBLE && ch.record_rows == 200 &&
                       strstr(ch.tune_message, "driver") != NULL &&
                       strstr(ch.tune_message, "checked against the float64 reference") != NULL,
                   "compatible %s: %s %s (%s)", tuned_dtype_name(compat[i].dtype),
                   tuned_source_name(ch.source), ch.config, ch.tune_message);
    call_case unfit = {TUNED_FP32, 5, 100, 100, 0, 0};
    if (run_case(h, &unfit, stream, &ch, false) == 0)
        EXPECT(ch.source != TUNED_SOURCE_COMPATIBLE && strstr(ch.tune_message, "not valid here"),
               "an unfit compatible config: %s %s (%s)", tuned_source_name(ch.source), ch.config,
               ch.tune_message);
    /* Grid splits: correct, cooperative, and many launches on two streams
     * at once (each its own workspace slot) neither hang nor trap. */
    {
        call_case split[] = {{TUNED_FP16, 1, 262144, 262144, 0, 0},
                             {TUNED_FP32, 24, 128256, 128256, 0, 0},
                             {TUNED_FP32, 24, 128256, 128256, 1, 3}};
        for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
            if (run_case(h, &split[i], stream, &ch, false) == 0)
                EXPECT(ch.source == TUNED_SOURCE_EXACT && ch.cooperative == 1 &&
                           strstr(ch.config, ".g") != NULL,
                       "grid split %lldx%lld: %s %s cooperative %d", (long long)split[i].rows,
                       (long long)split[i].cols, tuned_source_name(ch.source), ch.config,
                       ch.cooperative);
        CUstream other;
        d->cuStreamCreate(&other, CU_STREAM_NON_BLOCKING);
        size_t bytes = 262144 * 2;
        CUdeviceptr x, y1, y2;
        d->cuMemAlloc(&x, bytes);
        d->cuMemAlloc(&y1, bytes);
        d->cuMemAlloc(&y2, bytes);
        d->cuMemsetD8(x, 0, bytes);
        int failed = 0;
        for (int i = 0; i < 500 && failed == 0; i++)
            failed = tuned_softmax(h, (void *)(uintptr_t)x, (void *)(uintptr_t)(i % 2 ? y1 : y2),
                                   1, 262144, 262144, TUNED_FP16, i % 2 ? stream : other);
        EXPECT(failed == 0, "grid split on two streams: %s", tuned_last_error(h));
        EXPECT(d->cuStreamSynchronize(stream) == CUDA_SUCCESS &&
                   d->cuStreamSynchronize(other) == CUDA_SUCCESS,
               "grid split launches on two streams failed");
        d->cuMemFree(x);
        d->cuMemFree(y1);
        d->cuMemFree(y2);
        d->cuStreamDestroy(other);
        if (run_case(h, &split[0], stream, &ch, true) == 0)
            EXPECT(ch.cooperative == 1, "grid split after the streams");
        graph_case(h, &split[0], stream);
        graph_case(h, &split[1], stream);
    }
    EXPECT(tuned_lookup(h, TUNED_KERNEL_SOFTMAX, 256, 4096, TUNED_FP32, -1, &ch) == 0 &&
               ch.source == TUNED_SOURCE_EXACT && ch.function == NULL,
           "lookup: %s", tuned_last_error(h));

    /* The fast path: the same entry, and its cost. */
    {
        size_t bytes = 64 * 1000 * 2;
        CUdeviceptr x, y;
        d->cuMemAlloc(&x, bytes);
        d->cuMemAlloc(&y, bytes);
        d->cuMemsetD8Async(x, 0, bytes, stream);
        tuned_choice first;
        EXPECT(tuned_prepare(h, TUNED_KERNEL_SOFTMAX,
                             (const void *[]){(void *)(uintptr_t)x, (void *)(uintptr_t)y}, 64,
                             1000, 1000, TUNED_FP16, &first) == 0,
               "prepare: %s", tuned_last_error(h));
        double t0 = now_s();
        const int calls = 2000;
        for (int i = 0; i < calls; i++) {
            if (i % 200 == 0)
                d->cuStreamSynchronize(stream);
            tuned_softmax(h, (void *)(uintptr_t)x, (void *)(uintptr_t)y, 64, 1000, 1000,
                          TUNED_FP16, stream);
        }
        double t1 = now_s();
        d->cuStreamSynchronize(stream);
        EXPECT(tuned_last_choice(h, &ch) == 0 && ch.function == first.function, "same kernel");
        printf("fast path: %.2f us per call (host, with the launch)\n", (t1 - t0) / calls * 1e6);
        d->cuMemFree(x);
        d->cuMemFree(y);
    }

    /* Errors. */
    {
        CUdeviceptr x;
        d->cuMemAlloc(&x, 1 << 20);
        void *p = (void *)(uintptr_t)x;
        EXPECT(tuned_softmax(h, (char *)p + 1, (char *)p + 65536, 4, 100, 100, TUNED_FP16, stream) ==
                       TUNED_EINVAL &&
                   strstr(tuned_last_error(h), "aligned") != NULL,
               "misaligned: %s", tuned_last_error(h));
        EXPECT(tuned_softmax(h, p, (char *)p + 100, 4, 100, 100, TUNED_FP16, stream) ==
                       TUNED_EINVAL &&
                   strstr(tuned_last_error(h), "overlap") != NULL,
               "overlap: %s", tuned_last_error(h));
        EXPECT(tuned_softmax(h, p, (char *)p + 65536, 4, 100, 99, TUNED_FP16, stream) ==
                       TUNED_EINVAL &&
                   strstr(tuned_last_error(h), "row_stride") != NULL,
               "stride: %s", tuned_last_error(h));
        EXPECT(tuned_softmax(h, p, (char *)p + 65536, 0, 100, 100, TUNED_FP16, stream) ==
                   TUNED_EINVAL,
               "zero rows");
        EXPECT(tuned_softmax(h, p, (char *)p + 65536, 4, 100, 100, (tuned_dtype)5, stream) ==
                   TUNED_EINVAL,
               "dtype");
        d->cuMemFree(x);
    }

    /* Threads and a context-less thread. */
    {
        pthread_t t[8];
        worker w[8];
        for (int i = 0; i < 8; i++) {
            w[i] = (worker){.h = h, .id = i};
            pthread_create(&t[i], NULL, worker_main, &w[i]);
        }
        for (int i = 0; i < 8; i++)
            pthread_join(t[i], NULL);
        pthread_t nc;
        pthread_create(&nc, NULL, no_context_main, h);
        pthread_join(nc, NULL);
        printf("threads: 8 x 40 calls checked\n");
    }

    /* An explicit tune through a child `tuned` process. */
    {
        call_case c = {TUNED_FP16, 512, 1000, 1000, 0, 0};
        run_case(h, &c, stream, &ch, true);
        EXPECT(ch.source != TUNED_SOURCE_EXACT, "512x1000 not tuned yet");
        double t0 = now_s();
        rc = tuned_tune(h, TUNED_KERNEL_SOFTMAX, 512, 1000, TUNED_FP16, -1, 3.0);
        EXPECT(rc == 0, "tuned_tune: %s", tuned_last_error(h));
        printf("tuned_tune 512x1000 fp16: %.1f s\n", now_s() - t0);
        if (run_case(h, &c, stream, &ch, false) == 0)
            EXPECT(ch.source == TUNED_SOURCE_EXACT && ch.tune == TUNED_TUNE_DONE,
                   "after tuned_tune: %s, tune state %d (%s)", tuned_source_name(ch.source),
                   (int)ch.tune, ch.tune_message);
    }

    /* A second handle on the same store (one LMDB environment shared),
     * tuning in the background. */
    {
        tuned_options po = o;
        po.policy = TUNED_POLICY_PROCESS;
        po.tune_time_s = 3.0;
        tuned_handle *h2 = NULL;
        EXPECT(tuned_open(&h2, &po) == 0, "second handle: %s", tuned_last_error(NULL));
        if (h2 != NULL) {
            call_case c = {TUNED_BF16, 96, 3000, 3000, 0, 0};
            run_case(h2, &c, stream, &ch, true);
            EXPECT(ch.source != TUNED_SOURCE_EXACT && ch.tune == TUNED_TUNE_QUEUED,
                   "background tune queued: %s %d %s", tuned_source_name(ch.source), (int)ch.tune,
                   ch.tune_message);
            double t0 = now_s();
            while (ch.source != TUNED_SOURCE_EXACT && now_s() - t0 < 240) {
                struct timespec ts = {.tv_sec = 0, .tv_nsec = 500000000L};
                nanosleep(&ts, NULL);
                if (run_case(h2, &c, stream, &ch, true) != 0 || ch.tune == TUNED_TUNE_FAILED)
                    break;
            }
            EXPECT(ch.source == TUNED_SOURCE_EXACT,
                   "the background tune did not land: %s, state %d: %s",
                   tuned_source_name(ch.source), (int)ch.tune, ch.tune_message);
            printf("background tune 96x3000 bf16: exact %s after %.1f s\n", ch.config,
                   now_s() - t0);
            /* The first handle sees it too (same store). */
            EXPECT(tuned_lookup(h, TUNED_KERNEL_SOFTMAX, 96, 3000, TUNED_BF16, 0, &ch) == 0 &&
                       ch.source == TUNED_SOURCE_EXACT,
                   "the first handle's lookup: %s", tuned_source_name(ch.source));
            tuned_close(h2);
        }
    }

    d->cuStreamDestroy(stream);
    tuned_close(h);
    d->cuDevicePrimaryCtxRelease(dev);
    tuned__nvrtc_unload(n);
    tuned__driver_unload(d);
    return expect_done("api-gpu", dir);
}
