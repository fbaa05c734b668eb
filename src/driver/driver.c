/* driver.c: dlopen of the CUDA driver and the one place CUresults become
 * tuned errors. */
#include "src/driver/driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuned.h"

/* The ABI every entry point is fetched at: CUDA 12.0 semantics, which
 * every driver tuned supports (>= 525) provides. */
#define PINNED_CUDA_VERSION 12000

typedef CUresult (*get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *status);

int tuned__driver_load(tuned__driver **out, tuned__err *e)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        return tuned__errf(e, TUNED_ENODRIVER,
                           "cuda: no CUDA driver found (%s); this machine has no NVIDIA GPU "
                           "driver, or libcuda.so.1 is not on the loader path",
                           why ? why : "libcuda.so.1");
    }
    void *sym = dlsym(lib, "cuGetProcAddress_v2");
    if (sym == NULL) {
        dlclose(lib);
        return tuned__errf(e, TUNED_ENODRIVER,
                           "cuda: libcuda.so.1 has no cuGetProcAddress_v2: the driver is older "
                           "than CUDA 12; tuned needs driver 525 or newer");
    }
    get_proc_address_fn get_proc;
    memcpy(&get_proc, &sym, sizeof sym);
    tuned__driver *d = calloc(1, sizeof *d);
    if (d == NULL) {
        dlclose(lib);
        return tuned__errf(e, TUNED_ENOMEM, "cuda: out of memory");
    }
    d->lib = lib;
#define TUNED__DRIVER_RESOLVE(name)                                                             \
    do {                                                                                        \
        void *fn = NULL;                                                                        \
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;           \
        CUresult r = get_proc(#name, &fn, PINNED_CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,     \
                              &status);                                                         \
        if (r != CUDA_SUCCESS || fn == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS) {         \
            tuned__driver_unload(d);                                                            \
            return tuned__errf(e, TUNED_ENODRIVER,                                              \
                               "cuda: the driver does not provide %s (error %d, status %d)",    \
                               #name, (int)r, (int)status);                                     \
        }                                                                                       \
        memcpy(&d->name, &fn, sizeof fn);                                                       \
    } while (0);
    TUNED__DRIVER_FUNCTIONS(TUNED__DRIVER_RESOLVE)
#undef TUNED__DRIVER_RESOLVE
    CUresult r = d->cuInit(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
        tuned__driver_unload(d);
        return tuned__errf(e, TUNED_ENODEV, "cuda: the driver is loaded but sees no GPU");
    }
    if (r != CUDA_SUCCESS) {
        int rc = tuned__cuda_check(d, r, e, "cuInit");
        tuned__driver_unload(d);
        return rc;
    }
    if ((r = d->cuDriverGetVersion(&d->version)) != CUDA_SUCCESS) {
        int rc = tuned__cuda_check(d, r, e, "cuDriverGetVersion");
        tuned__driver_unload(d);
        return rc;
    }
    *out = d;
    return 0;
}

void tuned__driver_unload(tuned__driver *d)
{
    if (d == NULL)
        return;
    dlclose(d->lib);
    free(d);
}

int tuned__cuda_check(const tuned__driver *d, CUresult r, tuned__err *e, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 0;
    const char *name = NULL, *text = NULL;
    if (d != NULL && d->cuGetErrorName != NULL)
        d->cuGetErrorName(r, &name);
    if (d != NULL && d->cuGetErrorString != NULL)
        d->cuGetErrorString(r, &text);
    int code = r == CUDA_ERROR_OUT_OF_MEMORY ? TUNED_ENOMEM : TUNED_ECUDA;
    if (name != NULL)
        return tuned__errf(e, code, "cuda: %s: %s: %s", what, name, text ? text : "");
    return tuned__errf(e, code, "cuda: %s: error %d", what, (int)r);
}

bool tuned__cuda_context_lost(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
        return true;
    default:
        return false;
    }
}
