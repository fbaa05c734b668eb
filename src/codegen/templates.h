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

/* The code hash of a GPU's identity under the default kind (its
 * fingerprint's; a kind's records are filed under tuned__kind_identity_hash). */
uint64_t tuned__templates_hash(void);

#endif
