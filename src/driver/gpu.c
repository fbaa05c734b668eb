/* gpu.c: reads a GPU's properties through the driver and makes its
 * identity (string, fingerprint, parts) through src/common/identity.c, the
 * one place identities are spelled. */
#include "src/driver/gpu.h"

#include <stdio.h>
#include <string.h>

#include "src/codegen/kind.h"
#include "src/codegen/templates.h"
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
    tuned__gpu_identify(out);
    return 0;
}

/* Negative values (never from a driver) read as 0 rather than wrap. */
static uint32_t u32(int v)
{
    return v > 0 ? (uint32_t)v : 0;
}

void tuned__gpu_identity(const tuned__gpu *g, unsigned kernel, const char *policy,
                         tuned__identity *out)
{
    const tuned__kind_spec *k = tuned__kind(kernel != 0 ? kernel : TUNED__KIND_DEFAULT);
    tuned__ident_facts f;
    memset(&f, 0, sizeof f);
    snprintf(f.gpu_name, sizeof f.gpu_name, "%s", g->name);
    f.cc_major = u32(g->cc_major);
    f.cc_minor = u32(g->cc_minor);
    f.sm_count = u32(g->sm_count);
    f.mem_mib = (uint64_t)(g->total_mem >> 20);
    f.driver_version = u32(g->driver_version);
    f.nvrtc_major = u32(g->nvrtc_major);
    f.nvrtc_minor = u32(g->nvrtc_minor);
    f.template_hash = tuned__kind_default_code(k) ? g->template_hash : tuned__kind_identity_hash(k);
    snprintf(f.policy, sizeof f.policy, "%s", policy != NULL ? policy : "");
    tuned__identity_make(&f, out);
}

void tuned__gpu_identify(tuned__gpu *g)
{
    tuned__identity id;
    tuned__gpu_identity(g, TUNED__KIND_DEFAULT, NULL, &id);
    _Static_assert(sizeof g->identity == sizeof id.full, "a GPU holds its whole identity string");
    memcpy(g->identity, id.full, sizeof g->identity);
    g->fingerprint = id.full_fp;
}

uint64_t tuned__gpu_kind_fp(const tuned__gpu *g, unsigned kernel)
{
    const tuned__kind_spec *k = tuned__kind(kernel != 0 ? kernel : TUNED__KIND_DEFAULT);
    if (tuned__kind_default_code(k))
        return g->fingerprint;
    tuned__identity id;
    tuned__gpu_identity(g, kernel, NULL, &id);
    return id.full_fp;
}
