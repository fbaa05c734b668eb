/* lce.h: the GPU side of a chunked linear cross-entropy (kind.h:
 * TUNED__EVALUATE_CHUNKED_LINEAR_CE): one mean loss block, forward and
 * backward, over tokens x vocab logits made a chunk of rows at a time.
 *
 * Per chunk of rows [c0, c1): logits = h[c0:c1] @ W^T (cublasGemmEx into
 * one chunk buffer), the inner kind's fused kernel in place on it (the
 * rows' losses, and over the logits their gradient at 1/count), then
 * dh[c0:c1] = dlogits @ W and dW += dlogits^T @ h[c0:c1] (summed in the
 * dtype, as bindings/python/tuned/linear_cross_entropy.py does with
 * torch's addmm); dW is zeroed first, as the Python call allocates it.
 * The inner kernel's config per chunk rows comes from the caller (the
 * tuner: the store's winner for (inner kind, dtype, chunk x vocab) on this
 * GPU, else its space's default); this file compiles it with NVRTC.
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

/* Chooses the inner kind's config for one chunk's shape (rows x vocab of
 * the inner kind): 0, or an error. */
typedef int (*tuned__lce_pick_fn)(void *ctx, const tuned__shape *inner, tuned__config *out,
                                  tuned__err *e);

#define TUNED__LCE_MAX_MODULES 40

typedef struct tuned__lce {
    const tuned__driver *d;
    const tuned__nvrtc *nvrtc;
    const tuned__cublas *blas;
    tuned__cublas_handle handle;
    int arch, sms;
    tuned_dtype dtype;
    size_t esize;
    uint64_t tokens, hidden, vocab;
    uint32_t max_chunk;     /* rows the chunk buffer holds */
    const tuned__kind_spec *inner;
    tuned__lce_pick_fn pick;
    void *pick_ctx;
    CUstream stream;
    CUdeviceptr h, w, labels, dh, dw, logits, loss, lse, gscale, error;
    /* the inner kernel, one module per chunk rows met so far */
    struct {
        uint32_t rows;
        CUmodule module;
        CUfunction fn;
        tuned__config config;
    } mod[TUNED__LCE_MAX_MODULES];
    unsigned nmod;
} tuned__lce;

/* Allocates tokens x vocab (hidden) buffers with a chunk buffer of
 * max_chunk rows, in the current context, for GEMMs on blas's handle
 * (made here, on stream). With ref non-NULL its inputs are uploaded, else
 * tiles of exact values. Cleans up on failure; close with tuned__lce_close. */
int tuned__lce_open(tuned__lce *l, const tuned__driver *d, const tuned__nvrtc *n,
                    const tuned__cublas *blas, int arch, int sms, const tuned__kind_spec *inner,
                    tuned_dtype dtype, uint64_t tokens, uint64_t hidden, uint64_t vocab,
                    uint32_t max_chunk, const tuned__lce_ref *ref, tuned__lce_pick_fn pick,
                    void *pick_ctx, CUstream stream, tuned__err *e);
void tuned__lce_close(tuned__lce *l);

/* Enqueues the whole loss block at chunk rows a chunk (at most
 * max_chunk); gemms_only leaves the inner kernel out (the floor). */
int tuned__lce_enqueue(tuned__lce *l, uint32_t chunk, bool gemms_only, tuned__err *e);

/* Runs the block at chunk rows over an instance opened with ref (outputs
 * poisoned first, so that a row or element left unwritten fails) and
 * compares with ref: *wrong and detail say whether and where. */
int tuned__lce_check(tuned__lce *l, const tuned__lce_ref *ref, uint32_t chunk, bool *wrong,
                     char *detail, size_t n, tuned__err *e);

#endif
