/* module.h: CUDA source to a loaded module: NVRTC compiles it to a cubin
 * for one architecture and the driver loads it into the current context.
 * The evaluator's and the linear cross-entropy's helper kernels and the
 * float64 check's reference kernels are made this way. */
#ifndef TUNED_DRIVER_MODULE_H
#define TUNED_DRIVER_MODULE_H

#include "src/codegen/nvrtc.h"
#include "src/driver/driver.h"

/* Compiles src (named name in NVRTC's messages) for sm_<arch> and loads
 * it: 0 and *out, or an error naming what (e.g. "the block kernels");
 * *out is NULL then. Unload with d->cuModuleUnload. */
int tuned__module_from_source(const tuned__driver *d, const tuned__nvrtc *n, const char *src,
                              const char *name, int arch, const char *what, CUmodule *out,
                              tuned__err *e);

#endif
