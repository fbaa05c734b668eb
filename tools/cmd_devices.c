/* cmd_devices.c: `tuned devices`: the GPUs the driver sees, or why none. */
#include "tools/cli.h"

int cli_cmd_devices(const cli_opts *o)
{
    (void)o;
    tuned__err e = {0};
    tuned__driver *d = NULL;
    if (tuned__driver_load(&d, &e) != 0)
        return cli_fail(&e);
    tuned__nvrtc *n = NULL;
    tuned__err nvrtc_err = {0};
    if (tuned__nvrtc_load(&n, &nvrtc_err) != 0)
        fprintf(stderr, "tuned: warning: %s\n", nvrtc_err.msg);
    int count = 0, rc = tuned__gpu_count(d, &count, &e);
    if (rc == 0 && count == 0)
        printf("the driver sees no GPU\n");
    for (int i = 0; rc == 0 && i < count; i++) {
        tuned__gpu g;
        if (n != NULL) {
            rc = tuned__gpu_query(d, n, i, &g, &e);
            if (rc == 0)
                printf("%d  %s  sm_%d%d  %d SMs  %.1f GiB  L2 %d MiB  driver %d.%d  %s\n", i,
                       g.name, g.cc_major, g.cc_minor, g.sm_count, g.total_mem / 1073741824.0,
                       g.l2_bytes >> 20, d->version / 1000, (d->version % 1000) / 10, g.identity);
        } else {
            char name[128];
            CUdevice dev;
            rc = tuned__cuda_check(d, d->cuDeviceGet(&dev, i), &e, "cuDeviceGet");
            if (rc == 0)
                rc = tuned__cuda_check(d, d->cuDeviceGetName(name, sizeof name, dev), &e,
                                       "cuDeviceGetName");
            if (rc == 0)
                printf("%d  %s\n", i, name);
        }
    }
    tuned__nvrtc_unload(n);
    tuned__driver_unload(d);
    return rc != 0 ? cli_fail(&e) : CLI_OK;
}
