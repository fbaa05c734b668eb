/* probe_gpu.c: the configs and the GPU a timing probe opens
 * (probe_gpu.h). */
#include "probe_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int probe_gpu_open(probe_gpu *p, const char *prog, char **texts, int ncfg)
{
    tuned__err e = {0};
    memset(p, 0, sizeof *p);
    p->cfgs = calloc((size_t)ncfg, sizeof *p->cfgs);
    p->res = calloc((size_t)ncfg, sizeof *p->res);
    if (p->cfgs == NULL || p->res == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return -1;
    }
    p->ncfg = ncfg;
    for (int i = 0; i < ncfg; i++)
        if (tuned__config_parse(texts[i], &p->cfgs[i], &e) != 0) {
            fprintf(stderr, "%s: %s\n", prog, e.msg);
            return -1;
        }
    if (tuned__driver_load(&p->d, &e) != 0 || tuned__nvrtc_load(&p->n, &e) != 0 ||
        tuned__gpu_query(p->d, p->n, 0, &p->gpu, &e) != 0) {
        fprintf(stderr, "%s: %s\n", prog, e.msg);
        return -1;
    }
    return 0;
}

void probe_gpu_close(probe_gpu *p)
{
    tuned__nvrtc_unload(p->n);
    tuned__driver_unload(p->d);
    free(p->cfgs);
    free(p->res);
    memset(p, 0, sizeof *p);
}
