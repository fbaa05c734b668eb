/* softmax.c: the smallest program that uses libtuned.
 *
 * Build it against the installed library:
 *
 *     cc softmax.c $(pkg-config --cflags --libs tuned) -o softmax
 *
 * It opens a handle, makes 256 rows of 1000 random fp32 values on GPU 0,
 * runs tuned_softmax on a stream, checks the result against a softmax
 * computed here, and says which config the call used. The application's
 * own CUDA calls (context, memory, copies) go through the driver API,
 * loaded with dlopen as libtuned does, so this file needs no CUDA headers
 * or libraries to build. Without a GPU it says so and exits 77 (the test
 * suite's "skipped"). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tuned.h>

#define SKIP 77
#define ROWS 256
#define COLS 1000

/* The few driver entry points this program calls (CUDA's ABI: a
 * CUdeviceptr is an unsigned long long, handles are pointers). */
typedef int (*init_fn)(unsigned);
typedef int (*device_get_fn)(int *, int);
typedef int (*retain_fn)(void **, int);
typedef int (*set_current_fn)(void *);
typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);
typedef int (*htod_fn)(unsigned long long, const void *, size_t);
typedef int (*dtoh_fn)(void *, unsigned long long, size_t);
typedef int (*stream_create_fn)(void **, unsigned);
typedef int (*stream_sync_fn)(void *);
typedef int (*stream_destroy_fn)(void *);

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "example: libcuda.so.1 has no %s\n", name);
        exit(1);
    }
    return p;
}

int main(void)
{
    tuned_handle *h = NULL;
    int rc = tuned_open(&h, NULL);
    if (rc == TUNED_ENODRIVER || rc == TUNED_ENODEV) {
        printf("example: no GPU here, skipped: %s\n", tuned_last_error(NULL));
        return SKIP;
    }
    if (rc != 0) {
        fprintf(stderr, "example: tuned_open: %s: %s\n", tuned_strerror(rc),
                tuned_last_error(NULL));
        return 1;
    }
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (cuda == NULL) {
        fprintf(stderr, "example: %s\n", dlerror());
        tuned_close(h);
        return 1;
    }
    init_fn cu_init = (init_fn)sym(cuda, "cuInit");
    device_get_fn cu_device_get = (device_get_fn)sym(cuda, "cuDeviceGet");
    retain_fn cu_retain = (retain_fn)sym(cuda, "cuDevicePrimaryCtxRetain");
    set_current_fn cu_set_current = (set_current_fn)sym(cuda, "cuCtxSetCurrent");
    alloc_fn cu_alloc = (alloc_fn)sym(cuda, "cuMemAlloc_v2");
    free_fn cu_free = (free_fn)sym(cuda, "cuMemFree_v2");
    htod_fn cu_htod = (htod_fn)sym(cuda, "cuMemcpyHtoD_v2");
    dtoh_fn cu_dtoh = (dtoh_fn)sym(cuda, "cuMemcpyDtoH_v2");
    stream_create_fn cu_stream_create = (stream_create_fn)sym(cuda, "cuStreamCreate");
    stream_sync_fn cu_stream_sync = (stream_sync_fn)sym(cuda, "cuStreamSynchronize");
    stream_destroy_fn cu_stream_destroy = (stream_destroy_fn)sym(cuda, "cuStreamDestroy_v2");

    int dev;
    void *ctx, *stream;
    unsigned long long x, y;
    size_t bytes = (size_t)ROWS * COLS * sizeof(float);
    float *host = malloc(bytes), *out = malloc(bytes);
    if (host == NULL || out == NULL || cu_init(0) != 0 || cu_device_get(&dev, 0) != 0 ||
        cu_retain(&ctx, dev) != 0 || cu_set_current(ctx) != 0 || cu_alloc(&x, bytes) != 0 ||
        cu_alloc(&y, bytes) != 0 || cu_stream_create(&stream, 0) != 0) {
        fprintf(stderr, "example: CUDA setup failed\n");
        return 1;
    }
    srand(1);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
        host[i] = (float)rand() / (float)RAND_MAX * 10.0f - 5.0f;
    cu_htod(x, host, bytes);

    /* The call: rows of COLS elements, back to back, on our stream. */
    rc = tuned_softmax(h, (const void *)(uintptr_t)x, (void *)(uintptr_t)y, ROWS, COLS, COLS,
                       TUNED_FP32, stream);
    if (rc != 0) {
        fprintf(stderr, "example: tuned_softmax: %s: %s\n", tuned_strerror(rc),
                tuned_last_error(h));
        return 1;
    }
    cu_stream_sync(stream);
    cu_dtoh(out, y, bytes);

    double worst = 0;
    for (int r = 0; r < ROWS; r++) {
        const float *row = host + (size_t)r * COLS;
        double m = row[0], sum = 0;
        for (int c = 1; c < COLS; c++)
            m = row[c] > m ? row[c] : m;
        for (int c = 0; c < COLS; c++)
            sum += exp(row[c] - m);
        for (int c = 0; c < COLS; c++) {
            double want = exp(row[c] - m) / sum;
            double err = fabs(out[(size_t)r * COLS + c] - want) / want;
            worst = err > worst ? err : worst;
        }
    }
    tuned_choice choice;
    tuned_last_choice(h, &choice);
    printf("example: softmax of %dx%d fp32 on %s: config %s (%s), worst relative error %.2e\n",
           ROWS, COLS, choice.gpu, choice.config, tuned_source_name(choice.source), worst);

    cu_stream_destroy(stream);
    cu_free(x);
    cu_free(y);
    free(host);
    free(out);
    tuned_close(h);
    return worst < 1e-4 ? 0 : 1;
}
