/* tuned.h: the one public header of libtuned, the softmax autotuner.
 *
 * Every function that can fail returns 0 or a negative TUNED_E* code;
 * tuned_strerror() names a code. Functions that can fail with more to say
 * also fill a caller-provided message buffer. Nothing here is global or
 * mutable: all state lives in objects the caller owns. */
#ifndef TUNED_H
#define TUNED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TUNED_EXTERN __attribute__((visibility("default")))
#else
#define TUNED_EXTERN
#endif

#define TUNED_VERSION_STRING "0.1.0"

/* Error codes: 0 is success, every failure is negative. */
enum {
    TUNED_OK = 0,
    TUNED_EINVAL = -1,      /* a bad argument or input */
    TUNED_ENOMEM = -2,      /* out of host memory */
    TUNED_ENODRIVER = -3,   /* no CUDA driver (libcuda.so.1) could be loaded */
    TUNED_ENONVRTC = -4,    /* no NVRTC library could be loaded */
    TUNED_ENODEV = -5,      /* no such GPU */
    TUNED_ECUDA = -6,       /* a CUDA driver call failed */
    TUNED_ECOMPILE = -7,    /* NVRTC rejected a variant */
    TUNED_EWRONG = -8,      /* a variant computed a wrong softmax */
    TUNED_ESTORE = -9,      /* the LMDB store failed */
    TUNED_ENOTFOUND = -10,  /* no record for that key */
    TUNED_ESCHEMA = -11,    /* the store was written by an incompatible schema */
    TUNED_EIO = -12,        /* a file or socket operation failed */
    TUNED_ETIMEOUT = -13,   /* a budget or timeout ran out */
    TUNED_EUNSUPPORTED = -14, /* valid, but not supported on this GPU or build */
    TUNED_ENOSPACE = -15,   /* no valid variant for this shape */
};

/* A short English phrase for an error code; never NULL. */
TUNED_EXTERN const char *tuned_strerror(int err);

/* The library's version, e.g. "0.1.0". */
TUNED_EXTERN const char *tuned_version(void);

/* Element types of the softmax input and output; math is always fp32. */
typedef enum tuned_dtype {
    TUNED_FP16 = 0,
    TUNED_BF16 = 1,
    TUNED_FP32 = 2,
} tuned_dtype;

/* "fp16", "bf16", "fp32"; NULL for an unknown value. */
TUNED_EXTERN const char *tuned_dtype_name(tuned_dtype dtype);

/* Parses "fp16"/"half"/"float16", "bf16"/"bfloat16", "fp32"/"float"/"float32".
 * Returns 0 or TUNED_EINVAL. */
TUNED_EXTERN int tuned_dtype_parse(const char *name, tuned_dtype *out);

/* Size in bytes of one element of dtype (2 or 4); 0 for an unknown value. */
TUNED_EXTERN size_t tuned_dtype_size(tuned_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif /* TUNED_H */
