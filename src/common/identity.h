/* identity.h: what a stored result depends on, in four named parts.
 *
 * A measured winner holds for the system that measured it. Which facts of
 * that system matter differ in kind, so the identity is split into parts,
 * each with a text form and a 64-bit fingerprint (FNV-1a of the text):
 *
 *   hardware class  GPU model, compute capability, SM count
 *                   "NVIDIA H100 80GB HBM3|sm_90|132sm"
 *   toolchain       driver API version, NVRTC version
 *                   "drv13000|nvrtc13.0"
 *   kernel code     templates + codegen hash
 *                   "tpldc3334dffb22c2bb"
 *   policy          how the result was measured (src/tuner/policy.h)
 *                   "l2flush-settle-events-median/3"
 *
 * The whole identity string, whose fingerprint files a record in the store
 * (gpu_fp), spells the first three and the memory size:
 *   NAME|sm_XY|<SMs>sm|<MiB>MiB|drv<version>|nvrtc<M>.<m>|tpl<hash>
 * It is built here and only here, from the same facts as the parts, for a
 * live GPU (src/driver/gpu.c) and from a stored record (cache/record.c), so
 * the two always agree. Which parts must match for a record to be served
 * (exact, compatible, nearest) is docs/store-format.md's "Serving tiers". */
#ifndef TUNED_COMMON_IDENTITY_H
#define TUNED_COMMON_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#define TUNED__IDENT_TEXT 512      /* the whole identity string and its NUL */
#define TUNED__IDENT_PART_TEXT 192 /* one part's text and its NUL */

/* The facts an identity is made of. */
typedef struct tuned__ident_facts {
    char gpu_name[128];           /* e.g. "NVIDIA H100 80GB HBM3" */
    uint32_t cc_major, cc_minor;  /* compute capability */
    uint32_t sm_count;
    uint64_t mem_mib;             /* device memory, MiB (in the whole string only) */
    uint32_t driver_version;      /* cuDriverGetVersion(), e.g. 13000 */
    uint32_t nvrtc_major, nvrtc_minor;
    uint64_t template_hash;       /* templates + codegen version */
    char policy[64];              /* "": none (a GPU alone measures nothing) */
} tuned__ident_facts;

typedef struct tuned__ident_part {
    char text[TUNED__IDENT_PART_TEXT];
    uint64_t fp;                  /* FNV-1a 64 of text; 0 for an empty text */
} tuned__ident_part;

typedef struct tuned__identity {
    tuned__ident_facts f;
    char full[TUNED__IDENT_TEXT]; /* the whole identity string */
    uint64_t full_fp;             /* its fingerprint: a store key's gpu_fp */
    tuned__ident_part hwclass, toolchain, code, policy;
} tuned__identity;

/* Which parts differ (tuned__identity_diff). Memory is in the whole string
 * but in no part: GPUs of one model report slightly different sizes under
 * different drivers, and the size does not change a kernel's code. */
enum {
    TUNED__IDENT_HWCLASS = 1u << 0,
    TUNED__IDENT_TOOLCHAIN = 1u << 1,
    TUNED__IDENT_CODE = 1u << 2,
    TUNED__IDENT_POLICY = 1u << 3,
    TUNED__IDENT_MEMORY = 1u << 4,
};

/* FNV-1a 64 of a NUL-terminated text: the fingerprint of an identity
 * string or of one part. */
uint64_t tuned__ident_fingerprint(const char *text);

/* Makes the whole string and the four parts from f (copied into out).
 * Strings too long for their arrays are cut, never overflowed; a GPU name
 * fits (gpu_name is 128 bytes, the texts have room for it). */
void tuned__identity_make(const tuned__ident_facts *f, tuned__identity *out);

/* The TUNED__IDENT_* bits of the parts in which a differs from here (0:
 * the same system, measured the same way). why (n bytes, may be NULL)
 * lists them for people, e.g. "driver 12080 (here 13000); nvrtc 12.8
 * (here 13.0)". */
unsigned tuned__identity_diff(const tuned__identity *a, const tuned__identity *here, char *why,
                              size_t n);

#endif
