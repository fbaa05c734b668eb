/* templates.h: the CUDA templates of kernels/templates/, embedded into the
 * library at build time by kernels/embed.py. */
#ifndef TUNED_CODEGEN_TEMPLATES_H
#define TUNED_CODEGEN_TEMPLATES_H

#include <stddef.h>
#include <stdint.h>

typedef struct tuned__template {
    const char *name; /* file name without ".cu", e.g. "softmax_rows" */
    const char *text; /* NUL-terminated */
    size_t size;      /* bytes, without the NUL */
} tuned__template;

extern const tuned__template tuned__templates[];
extern const size_t tuned__template_count;

/* The template called name, or NULL. */
const tuned__template *tuned__template_find(const char *name);

/* The code hash of the GPU identity under which results are stored (the
 * kinds' common one until each kind's code identity files its records:
 * tuned__kind_legacy_code_hash). */
uint64_t tuned__templates_hash(void);

#endif
