/* stub_cuda.c: a TEST STAND-IN for libcuda.so.1, never installed. It lets
 * tests drive the embedding API's and the tuner's host logic on a machine
 * without a GPU: one device (a "Stub H100": sm_90, 132 SMs), one context,
 * host memory as device memory, and launches that do nothing (so no
 * kernel's result is ever right). Tests load it by putting its build
 * folder first on LD_LIBRARY_PATH (tests/meson.build); they read its
 * counters (stub_cuda_allocs, stub_cuda_launches) with dlsym. Only what
 * the driver layer resolves is here (src/driver/driver.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
#define OK 0
static __thread void *current;
static char ctx_obj[64];
static long launches, allocs;

#define F(name) static CUresult s_##name
F(cuInit)(unsigned f) { (void)f; return OK; }
F(cuDriverGetVersion)(int *v) { *v = 12080; return OK; }
F(cuGetErrorName)(int r, const char **s) { static char b[64]; snprintf(b, 64, "STUB_ERROR_%d", r); *s = b; return OK; }
F(cuGetErrorString)(int r, const char **s) { (void)r; *s = "stub error"; return OK; }
F(cuDeviceGetCount)(int *n) { *n = 1; return OK; }
F(cuDeviceGet)(int *d, int i) { *d = i; return i == 0 ? OK : 101; }
F(cuDeviceGetName)(char *n, int len, int d) { (void)d; snprintf(n, (size_t)len, "Stub H100"); return OK; }
F(cuDeviceGetAttribute)(int *v, int a, int d)
{
    (void)d;
    switch (a) {
    case 75: *v = 9; break;           /* CC major */
    case 76: *v = 0; break;           /* CC minor */
    case 16: *v = 132; break;         /* SMs */
    case 38: *v = 50 << 20; break;    /* L2 */
    default: *v = 1;
    }
    return OK;
}
F(cuDeviceTotalMem)(size_t *b, int d) { (void)d; *b = (size_t)80 << 30; return OK; }
F(cuDeviceGetUuid)(void *u, int d) { (void)d; memset(u, 0, 16); return OK; }
F(cuDevicePrimaryCtxRetain)(void **c, int d) { (void)d; *c = ctx_obj; return OK; }
F(cuDevicePrimaryCtxRelease)(int d) { (void)d; return OK; }
F(cuCtxSetCurrent)(void *c) { current = c; return OK; }
F(cuCtxGetCurrent)(void **c) { *c = current; return OK; }
F(cuCtxGetDevice)(int *d) { if (!current) return 201; *d = 0; return OK; }
F(cuCtxPushCurrent)(void *c) { current = c; return OK; }
F(cuCtxPopCurrent)(void **c) { *c = current; return OK; }
F(cuPointerGetAttribute)(void *data, int attr, uintptr_t p) { (void)p; if (attr == 1) *(void **)data = ctx_obj; return OK; }
F(cuStreamIsCapturing)(void *s, int *st) { (void)s; *st = 0; return OK; }
F(cuCtxSynchronize)(void) { return OK; }
F(cuStreamCreate)(void **s, unsigned f) { (void)f; *s = malloc(1); return OK; }
F(cuStreamDestroy)(void *s) { free(s); return OK; }
F(cuStreamSynchronize)(void *s) { (void)s; return OK; }
F(cuEventCreate)(void **e, unsigned f) { (void)f; *e = malloc(1); return OK; }
F(cuEventDestroy)(void *e) { free(e); return OK; }
F(cuEventRecord)(void *e, void *s) { (void)e; (void)s; return OK; }
F(cuEventSynchronize)(void *e) { (void)e; return OK; }
F(cuEventElapsedTime)(float *ms, void *a, void *b) { (void)a; (void)b; *ms = 0.01f; return OK; }
F(cuMemAlloc)(uintptr_t *p, size_t n) { allocs++; *p = (uintptr_t)calloc(1, n ? n : 1); return *p ? OK : 2; }
F(cuMemFree)(uintptr_t p) { free((void *)p); return OK; }
F(cuMemGetInfo)(size_t *f, size_t *t) { *f = (size_t)1 << 30; *t = (size_t)80 << 30; return OK; }
F(cuMemcpyHtoD)(uintptr_t d, const void *s, size_t n) { memcpy((void *)d, s, n); return OK; }
F(cuMemcpyDtoH)(void *d, uintptr_t s, size_t n) { memcpy(d, (void *)s, n); return OK; }
F(cuMemcpyDtoDAsync)(uintptr_t d, uintptr_t s, size_t n, void *st) { (void)st; memcpy((void *)d, (void *)s, n); return OK; }
F(cuMemsetD8)(uintptr_t d, unsigned char v, size_t n) { memset((void *)d, v, n); return OK; }
F(cuMemsetD8Async)(uintptr_t d, unsigned char v, size_t n, void *s) { (void)s; memset((void *)d, v, n); return OK; }
F(cuMemsetD32Async)(uintptr_t d, unsigned v, size_t n, void *s) { (void)s; for (size_t i = 0; i < n; i++) ((unsigned *)d)[i] = v; return OK; }
F(cuModuleLoadData)(void **m, const void *img) { (void)img; *m = malloc(8); return OK; }
F(cuModuleUnload)(void *m) { free(m); return OK; }
/* A function is its module's memory (as a real one is owned by its module:
 * freed with it, never on its own). */
F(cuModuleGetFunction)(void **f, void *m, const char *n) { (void)n; *f = m; return OK; }
F(cuFuncGetAttribute)(int *v, int a, void *f) { (void)a; (void)f; *v = 0; return OK; }
F(cuFuncSetAttribute)(void *f, int a, int v) { (void)f; (void)a; (void)v; return OK; }
F(cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *n, void *f, int b, size_t s) { (void)f; (void)b; (void)s; *n = 1; return OK; }
F(cuOccupancyMaxActiveClusters)(int *n, void *f, const void *c) { (void)f; (void)c; *n = 8; return OK; }
F(cuLaunchKernel)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned sm, void *s, void **p, void **x)
{
    (void)f, (void)gy, (void)gz, (void)by, (void)bz, (void)s, (void)p, (void)x;
    launches++;
    if (getenv("STUB_TRACE"))
        fprintf(stderr, "[stub] launch grid %u block %u smem %u\n", gx, bx, sm);
    return OK;
}
F(cuLaunchCooperativeKernel)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned sm, void *s, void **p)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)sm, (void)s, (void)p;
    launches++;
    return OK;
}

#define E(name) {#name, (void (*)(void))s_##name}
static const struct { const char *name; void (*fn)(void); } table[] = {
    E(cuInit), E(cuDriverGetVersion), E(cuGetErrorName), E(cuGetErrorString), E(cuDeviceGetCount),
    E(cuDeviceGet), E(cuDeviceGetName), E(cuDeviceGetAttribute), E(cuDeviceTotalMem),
    E(cuDeviceGetUuid), E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxRelease),
    E(cuCtxSetCurrent), E(cuCtxGetCurrent), E(cuCtxGetDevice), E(cuCtxPushCurrent),
    E(cuCtxPopCurrent), E(cuPointerGetAttribute), E(cuStreamIsCapturing), E(cuCtxSynchronize),
    E(cuStreamCreate), E(cuStreamDestroy), E(cuStreamSynchronize), E(cuEventCreate),
    E(cuEventDestroy), E(cuEventRecord), E(cuEventSynchronize), E(cuEventElapsedTime),
    E(cuMemAlloc), E(cuMemFree), E(cuMemGetInfo), E(cuMemcpyHtoD), E(cuMemcpyDtoH),
    E(cuMemcpyDtoDAsync), E(cuMemsetD8), E(cuMemsetD8Async), E(cuMemsetD32Async),
    E(cuModuleLoadData), E(cuModuleUnload), E(cuModuleGetFunction), E(cuFuncGetAttribute),
    E(cuFuncSetAttribute), E(cuOccupancyMaxActiveBlocksPerMultiprocessor),
    E(cuOccupancyMaxActiveClusters), E(cuLaunchKernel), E(cuLaunchCooperativeKernel),
};

#define STUB_EXPORT __attribute__((visibility("default")))
STUB_EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver,
                                         unsigned long long flags, int *status);
STUB_EXPORT long stub_cuda_launches(void);
STUB_EXPORT long stub_cuda_allocs(void);

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags,
                             int *status)
{
    (void)ver, (void)flags;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, sym) == 0) {
            memcpy(pfn, &table[i].fn, sizeof *pfn);
            if (status)
                *status = 0;
            return OK;
        }
    fprintf(stderr, "[stub] missing %s\n", sym);
    *pfn = NULL;
    if (status)
        *status = 1;
    return 500;
}

/* How many launches and device allocations the library has made. */
long stub_cuda_launches(void) { return launches; }
long stub_cuda_allocs(void) { return allocs; }
