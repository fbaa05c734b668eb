/* nvrtc.h: NVRTC, loaded at run time, and one-call compilation of a
 * generated source to a cubin (or to PTX, for inspection).
 *
 * libnvrtc is never linked: tuned__nvrtc_load() dlopens libnvrtc.so.13, then
 * .so.12, so the same binary starts where NVRTC is missing and says so.
 * Where it looks is tuned__nvrtc_search's comment; the generated kernels
 * include no header, so NVRTC is all a compile needs at run time. */
#ifndef TUNED_CODEGEN_NVRTC_H
#define TUNED_CODEGEN_NVRTC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/common/err.h"

typedef struct tuned__nvrtc tuned__nvrtc;

/* Where NVRTC is looked for, in this order; the first that loads wins:
 *   1. explicit_path ($TUNED_NVRTC_PATH): the library, or a directory
 *      holding libnvrtc.so.13 or .12. An explicit choice: nothing else
 *      is tried.
 *   2. loader: libnvrtc.so.13, then .12, through the dynamic loader
 *      (LD_LIBRARY_PATH, ldconfig, or one already loaded, as torch does).
 *   3. toolkit_root ($TUNED_TOOLKIT_ROOT, else /usr/local/cuda): its lib64/
 *      and lib/.
 *   4. site_packages ($TUNED_SITE_PACKAGES: directories separated by ':',
 *      which the Python package sets to its site-packages and sys.path
 *      before it loads libtuned, and child tunes inherit): the
 *      nvidia-* wheels that torch installs, nvidia/cu13/lib/libnvrtc.so.13
 *      (nvidia-cuda-nvrtc 13.x), then nvidia/cuda_nvrtc/lib/libnvrtc.so.12
 *      (nvidia-cuda-nvrtc-cu12).
 * NVRTC finds its builtins library beside itself. */
typedef struct tuned__nvrtc_search {
    const char *explicit_path; /* NULL: none */
    bool loader;
    const char *toolkit_root;  /* NULL: skip step 3 */
    const char *site_packages; /* NULL: skip step 4 */
} tuned__nvrtc_search;

/* The search the environment asks for (every step). */
void tuned__nvrtc_search_from_env(tuned__nvrtc_search *s);

/* Loads NVRTC from where the environment says (tuned__nvrtc_load), or
 * where s says; TUNED_ENONVRTC, with what was tried and how to install
 * it, when it cannot. The result is immutable and may be shared by
 * threads. */
int tuned__nvrtc_load(tuned__nvrtc **out, tuned__err *e);
int tuned__nvrtc_load_from(const tuned__nvrtc_search *s, tuned__nvrtc **out, tuned__err *e);

/* What was loaded: the path, or the soname the dynamic loader resolved. */
const char *tuned__nvrtc_path(const tuned__nvrtc *n);
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
