/* gpu.h: which GPU a measurement was taken on.
 *
 * The identity string names everything a stored result depends on: the
 * GPU model, compute capability, SM count, memory size, driver version,
 * NVRTC version and a hash of the kernel templates and codegen. Results are
 * filed under its fingerprint. Its parts (src/common/identity.h: hardware
 * class, toolchain, kernel code, and the caller's measurement policy)
 * decide which stored results may serve this GPU and how: exact,
 * compatible (another toolchain or policy, checked before use) or nearest
 * (another shape of the same hardware class). */
#ifndef TUNED_DRIVER_GPU_H
#define TUNED_DRIVER_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "src/codegen/nvrtc.h"
#include "src/common/identity.h"
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
    uint64_t template_hash;           /* the default kind's code hash */
    char identity[TUNED__IDENT_TEXT]; /* tuned__gpu_identify(): under the default kind */
    uint64_t fingerprint;             /* the GPU's: its identity's under the default kind */
} tuned__gpu;

/* Number of GPUs the driver sees. */
int tuned__gpu_count(const tuned__driver *d, int *count, tuned__err *e);

/* Queries GPU ordinal; TUNED_ENODEV names the ordinal and the count. */
int tuned__gpu_query(const tuned__driver *d, const tuned__nvrtc *n, int ordinal, tuned__gpu *out,
                     tuned__err *e);

/* Fills g->identity and g->fingerprint from its facts (name, compute
 * capability, SM count, memory, driver, NVRTC, template hash), as
 * tuned__gpu_query() does: for a GPU described by hand (tests, a fake GPU)
 * too, so that its identity is spelled as a real one's. */
void tuned__gpu_identify(tuned__gpu *g);

/* The identity of g (its whole string, fingerprint and parts) for results
 * of kind kernel (a TUNED_KERNEL_* id; 0 the default kind) measured under
 * policy (NULL or "": none). Computed from g's facts, so it holds for a
 * GPU whose identity string was never filled. A kind filed under the
 * default kind's code hash (tuned__kind_default_code) takes
 * g->template_hash, so a GPU described with another one (tests) keeps it;
 * any other kind its own (tuned__kind_identity_hash). */
void tuned__gpu_identity(const tuned__gpu *g, unsigned kernel, const char *policy,
                         tuned__identity *out);

/* The fingerprint the records of kind kernel measured on g are filed
 * under (a store key's gpu_fp): g->fingerprint for a kind filed under the
 * default kind's code, as g->identity is then its identity string. */
uint64_t tuned__gpu_kind_fp(const tuned__gpu *g, unsigned kernel);

#endif
