/* lce_reference.h: the float64 check of a chunked linear cross-entropy
 * (kind.h: TUNED__EVALUATE_CHUNKED_LINEAR_CE), on the host, no GPU.
 *
 * The instance: hidden h (T x H), weight W (V x H), labels (T; some
 * ignored), every input a multiple of 1/64 in [-1, 1] (exact in fp16, bf16
 * and fp32, so that host and GPU start from the same numbers). The mean
 * cross-entropy over the rows not ignored, its per-row losses, and its
 * gradients d h (T x H) and d W (V x H), in float64. A result passes when
 * each value is within what its dtype's roundings allow: the logits and
 * the gradient of the logits are rounded once to the dtype (relative
 * eps), and d W once a chunk as it is summed over the chunks. Kept apart
 * from the GPU code so that a CPU test can hold it to planted bugs. */
#ifndef TUNED_DRIVER_LCE_REFERENCE_H
#define TUNED_DRIVER_LCE_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "tuned.h"
#include "src/common/err.h"

typedef struct tuned__lce_ref {
    uint64_t tokens, hidden, vocab;
    tuned_dtype dtype;
    double *h, *w;          /* the inputs, as the dtype holds them */
    int64_t *labels;        /* ignore_index -100 on a few rows */
    double gscale;          /* 1 / rows not ignored */
    double *loss;           /* per row (0 where ignored) */
    double *dh, *dw;        /* the gradients of the mean */
    double *dh_mag, *dw_mag; /* the same sums over magnitudes: the error scale */
    double max_logit;       /* largest |logit| */
} tuned__lce_ref;

#define TUNED__LCE_IGNORE_INDEX (-100)

/* Draws an instance from seed and computes its float64 results; free
 * with tuned__lce_ref_free. TUNED_ENOMEM, TUNED_EINVAL for an empty one. */
int tuned__lce_ref_make(tuned__lce_ref *r, uint64_t tokens, uint64_t hidden, uint64_t vocab,
                        tuned_dtype dtype, uint64_t seed, tuned__err *e);
void tuned__lce_ref_free(tuned__lce_ref *r);

/* Compares a result with r: loss (fp32 per row), dh and dw (in the
 * dtype, dense) of a run over chunks of `chunk` rows, each in `blocks`
 * vocabulary blocks (1: whole rows). Returns the number of values outside
 * their bound and says the first in detail (n bytes). */
uint64_t tuned__lce_ref_compare(const tuned__lce_ref *r, const float *loss, const void *dh,
                                const void *dw, uint64_t chunk, uint64_t blocks, char *detail,
                                size_t n);

#endif
