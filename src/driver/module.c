/* module.c: CUDA source to a loaded module (see module.h). */
#include "src/driver/module.h"

#include <stdio.h>

int tuned__module_from_source(const tuned__driver *d, const tuned__nvrtc *n, const char *src,
                              const char *name, int arch, const char *what, CUmodule *out,
                              tuned__err *e)
{
    *out = NULL;
    tuned__blob cubin;
    int rc = tuned__nvrtc_compile(n, src, name, arch, TUNED__NVRTC_CUBIN, &cubin, e);
    if (rc != 0)
        return tuned__err_prefix(e, rc, "compiling %s: ", what);
    CUresult r = d->cuModuleLoadData(out, cubin.data);
    tuned__blob_free(&cubin);
    if (r != CUDA_SUCCESS) {
        *out = NULL;
        char context[160];
        snprintf(context, sizeof context, "loading %s", what);
        return tuned__cuda_check(d, r, e, context);
    }
    return 0;
}
