/* nvrtc.h: NVRTC, loaded at run time, and one-call compilation of a
 * generated source to a cubin (or to PTX, for inspection).
 *
 * libnvrtc is never linked: tuned__nvrtc_load() dlopens libnvrtc.so.13, then
 * .so.12, so the same binary starts where NVRTC is missing and says so. */
#ifndef TUNED_CODEGEN_NVRTC_H
#define TUNED_CODEGEN_NVRTC_H

#include <stddef.h>
#include <stdint.h>

#include "src/common/err.h"

typedef struct tuned__nvrtc tuned__nvrtc;

/* Loads NVRTC; TUNED_ENONVRTC with the loader's reason when it cannot.
 * The result is immutable and may be shared by threads. */
int tuned__nvrtc_load(tuned__nvrtc **out, tuned__err *e);
void tuned__nvrtc_unload(tuned__nvrtc *n);

/* NVRTC's version, e.g. 13 and 0. */
void tuned__nvrtc_version(const tuned__nvrtc *n, int *major, int *minor);

/* What a compile produced. */
typedef struct tuned__blob {
    char *data;        /* cubin or PTX text (NUL-terminated), malloc'd */
    size_t size;       /* bytes of data (for PTX, without the NUL) */
    double compile_ms; /* wall time NVRTC took */
} tuned__blob;

enum {
    TUNED__NVRTC_CUBIN = 0, /* machine code for sm_<arch> */
    TUNED__NVRTC_PTX = 1,   /* PTX for compute_<arch> */
};

/* Compiles source for arch (e.g. 90) into out. name labels errors:
 * "nvrtc: softmax w8.r1.v8...: <log>". Thread-safe. */
int tuned__nvrtc_compile(const tuned__nvrtc *n, const char *source, const char *name, int arch,
                         int output, tuned__blob *out, tuned__err *e);

void tuned__blob_free(tuned__blob *b);

/* A 64-bit hash of everything a compile's output depends on: the source
 * text, the options, the architecture and output kind, NVRTC's version.
 * The compile cache files cubins under it. */
uint64_t tuned__nvrtc_cache_key(const tuned__nvrtc *n, const char *source, int arch, int output);

#endif
