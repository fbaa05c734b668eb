/* cross_entropy.h: the host's copy of the options block the cross-entropy
 * kinds' kernels take by value (kernels/templates/cross_entropy.cu,
 * struct CeParams), field for field, and its error bits. The template
 * asserts the same size and alignment, so a change on one side only does
 * not compile on the other. */
#ifndef TUNED_CODEGEN_CROSS_ENTROPY_H
#define TUNED_CODEGEN_CROSS_ENTROPY_H

#include <stddef.h>
#include <stdint.h>

typedef struct tuned__ce_params {
    float scale;              /* s > 0 */
    float smoothing;          /* label smoothing eps in [0, 1] */
    float z_loss;             /* z >= 0: loss += z lse^2 */
    int32_t grad_per_row;     /* 1: grad_scale[r] per row; 0: grad_scale[0] */
    int64_t ignore_index;     /* a label that gives loss 0 and gradient 0 */
    const float *grad_scale;  /* device; NULL: 1 */
    float *z_out;             /* device, z lse^2 per row; NULL: not written */
    uint32_t *error;          /* device word OR-ed with TUNED__CE_ERR_*; NULL: none */
    void *argmax;             /* device, per row, the labels' type (TUNED__CE_FLAG_ARGMAX);
                                 NULL: not written */
    float softcap;            /* cap > 0 (TUNED__CE_FLAG_SOFTCAP); 0: none */
    int32_t classes;          /* V of the whole rows; 0: cols (above: the backward's slice) */
    int64_t class_offset;     /* the backward's slice's first class; 0: none */
    float *lse_lo;            /* device, per row, lse's low part: written by the forward,
                                 read by the backward; NULL: neither */
} tuned__ce_params;

_Static_assert(sizeof(tuned__ce_params) == 80 && _Alignof(tuned__ce_params) == 8 &&
                   offsetof(tuned__ce_params, ignore_index) == 16 &&
                   offsetof(tuned__ce_params, grad_scale) == 24 &&
                   offsetof(tuned__ce_params, error) == 40 &&
                   offsetof(tuned__ce_params, argmax) == 48 &&
                   offsetof(tuned__ce_params, softcap) == 56 &&
                   offsetof(tuned__ce_params, classes) == 60 &&
                   offsetof(tuned__ce_params, class_offset) == 64 &&
                   offsetof(tuned__ce_params, lse_lo) == 72,
               "tuned__ce_params is cross_entropy.cu's CeParams");

/* Bits of the error word. */
#define TUNED__CE_ERR_LABEL 1u  /* a label outside [0, V) that is not ignore_index */
#define TUNED__CE_ERR_SMOOTH 2u /* smoothing asked of a variant built without it */
#define TUNED__CE_ERR_SOFTCAP 4u /* a cap asked of a variant built without it */

/* The flags of the cross-entropy kinds (their spec's flag[]). */
#define TUNED__CE_FLAG_SMOOTH 1u  /* T_CE_SMOOTH */
#define TUNED__CE_FLAG_LABEL32 2u /* T_CE_LABEL32 */
#define TUNED__CE_FLAG_SOFTCAP 4u /* T_CE_SOFTCAP */
#define TUNED__CE_FLAG_ARGMAX 8u  /* T_CE_ARGMAX */

#endif
