/* cmd_get.c: `tuned get`: the stored winner for a shape on this GPU, or,
 * where no GPU can be identified, every GPU's record for the shape. */
#include "cli.h"

#define MAX_LISTED 64

/* The identity of GPU o->request.device, if driver and NVRTC are here. */
static bool local_gpu(const cli_opts *o, tuned__gpu *gpu, tuned__err *why)
{
    tuned__driver *d = NULL;
    tuned__nvrtc *n = NULL;
    bool ok = tuned__driver_load(&d, why) == 0 && tuned__nvrtc_load(&n, why) == 0 &&
              tuned__gpu_query(d, n, o->request.device, gpu, why) == 0;
    tuned__nvrtc_unload(n);
    tuned__driver_unload(d);
    return ok;
}

int cli_cmd_get(const cli_opts *o)
{
    const tuned__shape *s = &o->request.shape;
    const char *dtype = tuned_dtype_name(s->dtype);
    tuned__err e = {0};
    tuned__store *store = NULL;
    int rc = tuned__store_open(&store, o->db, TUNED__STORE_READONLY, &e);
    if (rc == TUNED_ENOTFOUND) {
        fprintf(stderr, "tuned: no record for %llux%llu %s: %s\n", (unsigned long long)s->rows,
                (unsigned long long)s->cols, dtype, e.msg);
        return CLI_NOT_FOUND;
    }
    if (rc != 0)
        return cli_fail(&e);
    tuned__gpu gpu;
    tuned__err no_gpu = {0};
    if (local_gpu(o, &gpu, &no_gpu)) {
        tuned__store_key key;
        tuned__record rec;
        tuned__tune_key(&gpu, s, &key);
        rc = tuned__store_get_best(store, &key, &rec, &e);
        tuned__store_close(store);
        if (rc == TUNED_ENOTFOUND) {
            fprintf(stderr, "tuned: no record for %llux%llu %s on %s (tune it with: tuned --shape "
                            "%llux%llu --dtype %s)\n",
                    (unsigned long long)s->rows, (unsigned long long)s->cols, dtype, gpu.name,
                    (unsigned long long)s->rows, (unsigned long long)s->cols, dtype);
            return CLI_NOT_FOUND;
        }
        if (rc != 0)
            return cli_fail(&e);
        cli_print_record(stdout, &rec);
        return CLI_OK;
    }
    /* No GPU to ask: show what is stored for every GPU. */
    tuned__record recs[MAX_LISTED];
    size_t n = 0;
    rc = tuned__store_find_shape(store, TUNED__KERNEL_SOFTMAX, (uint8_t)s->dtype, s->rows, s->cols,
                                 recs, MAX_LISTED, &n, &e);
    tuned__store_close(store);
    if (rc != 0)
        return cli_fail(&e);
    fprintf(stderr, "tuned: no local GPU to match (%s); records for every GPU:\n", no_gpu.msg);
    if (n == 0) {
        fprintf(stderr, "tuned: no record for %llux%llu %s on any GPU\n",
                (unsigned long long)s->rows, (unsigned long long)s->cols, dtype);
        return CLI_NOT_FOUND;
    }
    for (size_t i = 0; i < n && i < MAX_LISTED; i++) {
        if (i > 0)
            printf("\n");
        cli_print_record(stdout, &recs[i]);
    }
    return CLI_OK;
}
