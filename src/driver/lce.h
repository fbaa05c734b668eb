/* lce.h: the GPU side of a chunked linear cross-entropy (kind.h:
 * TUNED__EVALUATE_CHUNKED_LINEAR_CE): one mean loss block, forward and
 * backward, over tokens x vocab logits made a chunk of rows at a time.
 *
 * Per chunk of rows [c0, c1), whole rows ("chunk1024"): logits = h[c0:c1]
 * @ W^T (cublasGemmEx into one chunk buffer), the composite's inner kind's
 * fused kernel in place on it (the rows' losses, and over the logits their
 * gradient at 1/count), then dh[c0:c1] = dlogits @ W and dW += dlogits^T
 * @ h[c0:c1] (summed in the dtype, as bindings/python/tuned/
 * linear_cross_entropy.py does with torch's addmm); dW is zeroed first,
 * as the Python call allocates it.
 *
 * In vocabulary blocks ("chunk2048.v17": tuned__kind_block_cols wide, the
 * last narrower), as the Python call's blocks do: per block its logits
 * into the buffer, the block_lse kind's kernel (labels all ignored) for
 * its lse, and linear_ce_blocks.cu's pick of the target logit; then the
 * rows' lse and loss (linear_ce_blocks.cu's combine); then per block, the
 * last (still in the buffer) first and the others made again, the
 * block_grad kind's kernel in place over the block as a class slice, dh
 * += dlogits_b @ W_b and dW_b += dlogits_b^T @ h[c0:c1].
 *
 * The kernels' configs per shape come from the caller (the tuner: the
 * store's winner for (kind, dtype, rows x cols) on this GPU, else its
 * space's default); this file compiles them with NVRTC.
 *
 * The inputs of a timed instance are tiles of exact small values (their
 * values do not move a GEMM's time); a checked instance's are drawn by
 * lce_reference.c, whose float64 results it is compared with. */
#ifndef TUNED_DRIVER_LCE_H
#define TUNED_DRIVER_LCE_H

#include <stdbool.h>
#include <stdint.h>

#include "src/codegen/config.h"
#include "src/codegen/nvrtc.h"
#include "src/driver/cublas.h"
#include "src/driver/driver.h"
#include "src/driver/launch.h"
#include "src/driver/lce_reference.h"

/* Chooses the config of a kernel of the composite for one shape (a
 * kind it runs, rows x cols): 0, or an error. */
typedef int (*tuned__lce_pick_fn)(void *ctx, const tuned__shape *inner, tuned__config *out,
                                  tuned__err *e);

/* Kernels met so far, one module each (a cache: emptied when full). */
#define TUNED__LCE_MAX_MODULES 48

typedef struct tuned__lce {
    const tuned__driver *d;
    const tuned__nvrtc *nvrtc;
    const tuned__cublas *blas;
    tuned__cublas_handle handle;
    int arch, sms;
    tuned_dtype dtype;
    size_t esize;
    uint64_t tokens, hidden, vocab;
    uint64_t max_logits;    /* elements the logits buffer holds */
    const tuned__kind_spec *kind; /* the composite: its inner and block kinds */
    tuned__lce_pick_fn pick;
    void *pick_ctx;
    CUstream stream;
    CUdeviceptr h, w, labels, dh, dw, logits, loss, lse, gscale, error;
    /* the blocks' lse (blocks x chunk rows, grown to the largest chunk
     * met), target logits, and labels all ignore_index (tokens each) */
    CUdeviceptr block_lse, target, ignored;
    uint64_t block_lse_bytes;
    CUmodule blocks_module; /* linear_ce_blocks.cu (NULL: the kind has no blocks) */
    CUfunction pick_fn, combine_fn;
    struct {
        uint8_t kernel;
        uint32_t rows;
        uint64_t cols;
        CUmodule module;
        CUfunction fn;
        tuned__config config;
    } mod[TUNED__LCE_MAX_MODULES];
    unsigned nmod;
} tuned__lce;

/* Allocates tokens x vocab (hidden) buffers for composite kind `kind` with
 * a logits buffer of max_logits elements, in the current context, for
 * GEMMs on blas's handle (made here, on stream), and compiles its block
 * kernels. With ref non-NULL its inputs are uploaded, else tiles of exact
 * values. Cleans up on failure; close with tuned__lce_close. */
int tuned__lce_open(tuned__lce *l, const tuned__driver *d, const tuned__nvrtc *n,
                    const tuned__cublas *blas, int arch, int sms, const tuned__kind_spec *kind,
                    tuned_dtype dtype, uint64_t tokens, uint64_t hidden, uint64_t vocab,
                    uint64_t max_logits, const tuned__lce_ref *ref, tuned__lce_pick_fn pick,
                    void *pick_ctx, CUstream stream, tuned__err *e);
void tuned__lce_close(tuned__lce *l);

/* Enqueues the whole loss block at chunk config c (family chunk: its rows
 * times its block's columns at most max_logits); gemms_only leaves the
 * kernels out and makes each block's logits once (the floor: the three
 * GEMMs' work, which no chunk config removes). */
int tuned__lce_enqueue(tuned__lce *l, const tuned__config *c, bool gemms_only, tuned__err *e);

/* Runs the block at config c over an instance opened with ref (outputs
 * poisoned first, so that a row or element left unwritten fails) and
 * compares with ref: *wrong and detail say whether and where. */
int tuned__lce_check(tuned__lce *l, const tuned__lce_ref *ref, const tuned__config *c,
                     bool *wrong, char *detail, size_t n, tuned__err *e);

#endif
