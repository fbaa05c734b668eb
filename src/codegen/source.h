/* source.h: config -> complete CUDA source text, ready for NVRTC. */
#ifndef TUNED_CODEGEN_SOURCE_H
#define TUNED_CODEGEN_SOURCE_H

#include "src/codegen/config.h"

/* Bump whenever the generated text changes meaning without the template
 * text changing (it is hashed into the store's GPU identity). */
#define TUNED__CODEGEN_VERSION 3

typedef struct tuned__codegen_opts {
    bool unaligned; /* the base pointers may not be 16-byte aligned: never
                       assume rows start on a vector boundary */
    int plant_bug;  /* a test hook: 0 none, 1 skip each row's last element,
                       2 write one element past the last row; a build
                       without TUNED_TEST_HOOKS refuses any but 0
                       (TUNED_EUNSUPPORTED) */
    unsigned flags; /* the kind's compiled-in options (bit i: its flag[i]) */
} tuned__codegen_opts;

/* Whether a variant of c for shape s, with these opts, assumes every row
 * starts on a vector boundary (see T_HEAD_FREE in the template). */
bool tuned__source_head_free(const tuned__config *c, const tuned__shape *s,
                             const tuned__codegen_opts *opts);

/* The template path (TUNED__PATH_*) a config takes: its family and grid
 * split decide it. */
unsigned tuned__source_path(const tuned__config *c);

/* The kernel's entry point name in the generated source of c for s: its
 * kind's entry for the config's path (src/codegen/kind.h, which gives the
 * parameters); NULL for an unknown kind. */
const char *tuned__source_entry(const tuned__config *c, const tuned__shape *s);

/* Bytes of one shared-memory stage of a tma variant: the largest slice of
 * a row's 16-byte body one block of the cluster copies, rounded up to 128. */
size_t tuned__source_stage_bytes(const tuned__config *c, const tuned__shape *s);

/* Dynamic shared memory the variant launches with (0 for register rows). */
size_t tuned__source_dynamic_smem(const tuned__config *c, const tuned__shape *s);

/* Most dynamic shared memory one block may have on sm_90 (227 KiB), less
 * what the staged template declares statically. */
#define TUNED__MAX_DYNAMIC_SMEM (232448 - 1024)

/* Builds the source for config c specialised for shape s (its kernel,
 * dtype and columns); *out is malloc'd, the caller frees it. opts may be
 * NULL. */
int tuned__source_kernel(const tuned__config *c, const tuned__shape *s,
                          const tuned__codegen_opts *opts, char **out, tuned__err *e);

/* The source of the evaluator's helper kernels (input generators and the
 * float64 reference check) of kind k for dtype: its reference_parts;
 * *out is malloc'd. */
int tuned__source_reference(const tuned__kind_spec *k, tuned_dtype dtype, char **out,
                            tuned__err *e);

/* The source of a composite kind k's own kernels for vocabulary blocks
 * (its block_parts) for dtype; *out is malloc'd. */
int tuned__source_blocks(const tuned__kind_spec *k, tuned_dtype dtype, char **out,
                         tuned__err *e);

#endif
