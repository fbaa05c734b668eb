/* driver.h: the CUDA Driver API, loaded at run time.
 *
 * libcuda is never linked. tuned__driver_load() dlopens libcuda.so.1,
 * resolves cuGetProcAddress and fetches every other entry point through it
 * at a pinned ABI version (plain dlsym would return legacy ABIs for renamed
 * functions such as cuMemAlloc). Without a driver it fails with
 * TUNED_ENODRIVER and a message saying so; nothing crashes.
 *
 * Call sites use the table as d->cuMemAlloc(...): the field names come from
 * cuda.h's own macros, so they always match the pinned versions. */
#ifndef TUNED_DRIVER_DRIVER_H
#define TUNED_DRIVER_DRIVER_H

#include <cuda.h>
#include <stdbool.h>

#include "src/common/err.h"

/* The entry points tuned uses; X(name) for each. */
#define TUNED__DRIVER_FUNCTIONS(X)                                                              \
    X(cuInit)                                                                                   \
    X(cuDriverGetVersion)                                                                       \
    X(cuGetErrorName)                                                                           \
    X(cuGetErrorString)                                                                         \
    X(cuDeviceGetCount)                                                                         \
    X(cuDeviceGet)                                                                              \
    X(cuDeviceGetName)                                                                          \
    X(cuDeviceGetAttribute)                                                                     \
    X(cuDeviceTotalMem)                                                                         \
    X(cuDeviceGetUuid)                                                                          \
    X(cuDevicePrimaryCtxRetain)                                                                 \
    X(cuDevicePrimaryCtxRelease)                                                                \
    X(cuCtxSetCurrent)                                                                          \
    X(cuCtxGetCurrent)                                                                          \
    X(cuCtxGetDevice)                                                                           \
    X(cuCtxPushCurrent)                                                                         \
    X(cuCtxPopCurrent)                                                                          \
    X(cuPointerGetAttribute)                                                                    \
    X(cuStreamIsCapturing)                                                                      \
    X(cuCtxSynchronize)                                                                         \
    X(cuStreamCreate)                                                                           \
    X(cuStreamDestroy)                                                                          \
    X(cuStreamSynchronize)                                                                      \
    X(cuEventCreate)                                                                            \
    X(cuEventDestroy)                                                                           \
    X(cuEventRecord)                                                                            \
    X(cuEventSynchronize)                                                                       \
    X(cuEventElapsedTime)                                                                       \
    X(cuMemAlloc)                                                                               \
    X(cuMemFree)                                                                                \
    X(cuMemGetInfo)                                                                             \
    X(cuMemcpyHtoD)                                                                             \
    X(cuMemcpyDtoH)                                                                             \
    X(cuMemcpyDtoDAsync)                                                                        \
    X(cuMemsetD8)                                                                               \
    X(cuMemsetD8Async)                                                                          \
    X(cuMemsetD32Async)                                                                         \
    X(cuModuleLoadData)                                                                         \
    X(cuModuleUnload)                                                                           \
    X(cuModuleGetFunction)                                                                      \
    X(cuFuncGetAttribute)                                                                       \
    X(cuFuncSetAttribute)                                                                       \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                                              \
    X(cuOccupancyMaxActiveClusters)                                                             \
    X(cuLaunchKernel)                                                                           \
    X(cuLaunchCooperativeKernel)

typedef struct tuned__driver {
    void *lib;
    int version; /* cuDriverGetVersion, e.g. 13000 */
#define TUNED__DRIVER_FIELD(name) __typeof__(&name) name;
    TUNED__DRIVER_FUNCTIONS(TUNED__DRIVER_FIELD)
#undef TUNED__DRIVER_FIELD
} tuned__driver;

/* Loads libcuda.so.1 and calls cuInit. The table is immutable afterwards
 * and may be shared by threads. */
int tuned__driver_load(tuned__driver **out, tuned__err *e);
void tuned__driver_unload(tuned__driver *d);

/* Translates a failed CUresult into TUNED_ECUDA (TUNED_ENOMEM for out of
 * memory) with "cuda: <what>: CUDA_ERROR_X: <description>"; 0 stays 0. */
int tuned__cuda_check(const tuned__driver *d, CUresult r, tuned__err *e, const char *what);

/* Returns from the enclosing function (with the code) when a driver call
 * fails, the failure said through tuned__cuda_check as what, into the
 * tuned__err *e in scope. */
#define TUNED__CU_RETURN(d, call, what)                                                     \
    do {                                                                                    \
        int rc_ = tuned__cuda_check((d), (call), e, (what));                                \
        if (rc_ != 0)                                                                       \
            return rc_;                                                                     \
    } while (0)

/* Whether r is an error a running kernel leaves behind that kills its
 * context (an illegal or misaligned address, a trap, an illegal
 * instruction, a watchdog timeout): every later call in the context fails
 * with it, so the kernel that caused it is the one to blame. */
bool tuned__cuda_context_lost(CUresult r);

#endif
