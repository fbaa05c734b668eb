/* cublas.h: the few cuBLAS entry points a chunked evaluation needs
 * (kind.h: TUNED__EVALUATE_CHUNKED_LINEAR_CE), loaded at run time.
 *
 * libcublas is never linked, as libcuda and NVRTC are not: tuned__cublas_load
 * dlopens libcublas.so.13 (or .12) where NVRTC is looked for ($TUNED_NVRTC_PATH's
 * directory, the loader's path, $TUNED_TOOLKIT_ROOT/lib64 and lib, the
 * nvidia wheels under $TUNED_SITE_PACKAGES: torch's nvidia/cu13/lib), with
 * its libcublasLt loaded first from the same directory. The types and
 * constants are cuBLAS's ABI, spelled here so that no cuBLAS header is
 * needed to build (cublas_api.h, library_types.h say the same values).
 *
 * cuBLAS runs in the context current on the calling thread when the
 * handle is made (the CUDA runtime adopts a current driver context): the
 * evaluator makes the device's primary context current first, which is
 * the runtime's own, so memory from cuMemAlloc is valid for its GEMMs.
 * Failures come back as TUNED_ECUDA with cuBLAS's own words. */
#ifndef TUNED_DRIVER_CUBLAS_H
#define TUNED_DRIVER_CUBLAS_H

#include <cuda.h>
#include <stdbool.h>

#include "tuned.h"
#include "src/common/err.h"

typedef struct tuned__cublas_ctx *tuned__cublas_handle; /* cublasHandle_t */

/* cublasOperation_t */
enum { TUNED__CUBLAS_OP_N = 0, TUNED__CUBLAS_OP_T = 1 };

typedef struct tuned__cublas {
    void *lib, *lt;
    int (*create)(tuned__cublas_handle *h);                    /* cublasCreate_v2 */
    int (*destroy)(tuned__cublas_handle h);                    /* cublasDestroy_v2 */
    int (*set_stream)(tuned__cublas_handle h, CUstream s);     /* cublasSetStream_v2 */
    const char *(*status_string)(int status);                  /* cublasGetStatusString */
    int (*gemm_ex)(tuned__cublas_handle h, int transa, int transb, int m, int n, int k,
                   const void *alpha, const void *a, int atype, int lda, const void *b,
                   int btype, int ldb, const void *beta, void *c, int ctype, int ldc,
                   int compute, int algo);                     /* cublasGemmEx */
    char path[4096];
} tuned__cublas;

/* Loads cuBLAS (where the comment above says) into c; TUNED_EUNSUPPORTED
 * naming the places tried when there is none. Close with
 * tuned__cublas_unload (a zeroed one is fine). */
int tuned__cublas_load(tuned__cublas *c, tuned__err *e);
void tuned__cublas_unload(tuned__cublas *c);

/* 0, or TUNED_ECUDA with cuBLAS's name for status and what was done. */
int tuned__cublas_check(const tuned__cublas *c, int status, tuned__err *e, const char *what);

/* C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C in fp32
 * arithmetic, every matrix of dtype (fp16, bf16 or fp32; CUBLAS_COMPUTE_32F,
 * so fp32 is not rounded through TF32), on the handle's stream. */
int tuned__cublas_gemm(const tuned__cublas *c, tuned__cublas_handle h, tuned_dtype dtype,
                       int transa, int transb, int m, int n, int k, float alpha, CUdeviceptr a,
                       int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr out, int ldc,
                       tuned__err *e, const char *what);

#endif
