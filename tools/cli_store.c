/* cli_store.c: what the store commands (get, list, export, import, forget,
 * gc, verify) share: the local GPU, the record this system would write,
 * filters from the options, and opening the store. */
#include <string.h>

#include "tools/cli.h"

bool cli_local_gpu(int device, tuned__gpu *gpu, tuned__err *why)
{
    tuned__driver *d = NULL;
    tuned__nvrtc *n = NULL;
    bool ok = tuned__driver_load(&d, why) == 0 && tuned__nvrtc_load(&n, why) == 0 &&
              tuned__gpu_query(d, n, device, gpu, why) == 0;
    tuned__nvrtc_unload(n);
    tuned__driver_unload(d);
    return ok;
}

void cli_here_record(const tuned__gpu *gpu, const tuned__shape *shape, tuned__record *here)
{
    /* Through tuned__tune_record, the one place provenance is filled, so
     * what is compared is exactly what a tune here would store. */
    static tuned__tune_outcome o; /* large; the CLI is single-threaded */
    memset(&o, 0, sizeof o);
    o.gpu = *gpu;
    o.search.best_us = 1.0;
    tuned__tune_record(&o, shape, here);
    here->median_us = here->copy_us = here->gbps = 0;
    here->config[0] = '\0';
}

void cli_filter(const cli_opts *o, tuned__store_filter *f)
{
    memset(f, 0, sizeof *f);
    f->gpu = o->gpu;
    if (o->have_shape) {
        f->have_shape = true;
        f->rows = o->request.shape.rows;
        f->cols = o->request.shape.cols;
    }
    if (o->have_dtype) {
        f->have_dtype = true;
        f->dtype = (uint8_t)o->request.shape.dtype;
    }
}

int cli_open_store(const cli_opts *o, unsigned flags, tuned__store **s, tuned__err *e)
{
    /* Only tune and import (and serve) make a store; the other writers
     * (forget, gc) change an existing one, and a missing one is an error. */
    bool creates = o->command != NULL && (strcmp(o->command, "tune") == 0 ||
                                          strcmp(o->command, "import") == 0);
    if (!(flags & TUNED__STORE_READONLY) && !creates) {
        tuned__store *probe = NULL;
        int rc = tuned__store_open(&probe, o->db, TUNED__STORE_READONLY, e);
        tuned__store_close(probe);
        if (rc != 0)
            return rc;
    }
    return tuned__store_open(s, o->db, flags, e);
}
