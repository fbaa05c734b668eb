/* gpu.h: which GPU a measurement was taken on.
 *
 * The identity string names everything a stored result depends on: the
 * GPU model, compute capability, SM count, memory size, driver version,
 * NVRTC version and a hash of the kernel templates and codegen. Results are
 * filed under its fingerprint, so a changed driver or kernel is never served
 * a result measured under another. */
#ifndef TUNED_DRIVER_GPU_H
#define TUNED_DRIVER_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "src/codegen/nvrtc.h"
#include "src/driver/driver.h"

typedef struct tuned__gpu {
    int ordinal;
    CUdevice device;
    char name[128];
    int cc_major, cc_minor;
    int sm_count;
    size_t total_mem;
    int l2_bytes;
    int driver_version;
    int nvrtc_major, nvrtc_minor;
    uint64_t template_hash;
    char identity[512];
    uint64_t fingerprint;
} tuned__gpu;

/* Number of GPUs the driver sees. */
int tuned__gpu_count(const tuned__driver *d, int *count, tuned__err *e);

/* Queries GPU ordinal; TUNED_ENODEV names the ordinal and the count. */
int tuned__gpu_query(const tuned__driver *d, const tuned__nvrtc *n, int ordinal, tuned__gpu *out,
                     tuned__err *e);

#endif
