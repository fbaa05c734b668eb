/* gpu.c: reads a GPU's properties through the driver and builds its
 * identity string and fingerprint. */
#include "src/driver/gpu.h"

#include <stdio.h>
#include <string.h>

#include "src/codegen/templates.h"
#include "src/common/hash.h"
#include "tuned.h"

int tuned__gpu_count(const tuned__driver *d, int *count, tuned__err *e)
{
    return tuned__cuda_check(d, d->cuDeviceGetCount(count), e, "cuDeviceGetCount");
}

static int attribute(const tuned__driver *d, CUdevice dev, CUdevice_attribute a, int *out,
                     const char *what, tuned__err *e)
{
    return tuned__cuda_check(d, d->cuDeviceGetAttribute(out, a, dev), e, what);
}

int tuned__gpu_query(const tuned__driver *d, const tuned__nvrtc *n, int ordinal, tuned__gpu *out,
                     tuned__err *e)
{
    memset(out, 0, sizeof *out);
    int count = 0;
    int rc = tuned__gpu_count(d, &count, e);
    if (rc != 0)
        return rc;
    if (ordinal < 0 || ordinal >= count)
        return tuned__errf(e, TUNED_ENODEV, "cuda: no GPU %d (this machine has %d)", ordinal,
                           count);
    out->ordinal = ordinal;
    if ((rc = tuned__cuda_check(d, d->cuDeviceGet(&out->device, ordinal), e, "cuDeviceGet")) ||
        (rc = tuned__cuda_check(d, d->cuDeviceGetName(out->name, sizeof out->name, out->device),
                                e, "cuDeviceGetName")) ||
        (rc = tuned__cuda_check(d, d->cuDeviceTotalMem(&out->total_mem, out->device), e,
                                "cuDeviceTotalMem")) ||
        (rc = attribute(d, out->device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                        &out->cc_major, "compute capability", e)) ||
        (rc = attribute(d, out->device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                        &out->cc_minor, "compute capability", e)) ||
        (rc = attribute(d, out->device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                        &out->sm_count, "SM count", e)) ||
        (rc = attribute(d, out->device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &out->l2_bytes,
                        "L2 size", e)))
        return rc;
    out->driver_version = d->version;
    tuned__nvrtc_version(n, &out->nvrtc_major, &out->nvrtc_minor);
    out->template_hash = tuned__templates_hash();
    snprintf(out->identity, sizeof out->identity,
             "%s|sm_%d%d|%dsm|%zuMiB|drv%d|nvrtc%d.%d|tpl%016llx", out->name, out->cc_major,
             out->cc_minor, out->sm_count, out->total_mem >> 20, out->driver_version,
             out->nvrtc_major, out->nvrtc_minor, (unsigned long long)out->template_hash);
    out->fingerprint = tuned__fnv1a64(out->identity, strlen(out->identity), TUNED__FNV_SEED);
    return 0;
}
