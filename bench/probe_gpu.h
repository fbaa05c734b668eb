/* probe_gpu.h: what the bench's timing probes (probe_settle, probe_attrs)
 * open before they time anything: the configs of their command line, a
 * result slot each, the CUDA driver, NVRTC and GPU 0. Not installed. */
#ifndef TUNED_BENCH_PROBE_GPU_H
#define TUNED_BENCH_PROBE_GPU_H

#include "src/driver/gpu.h"
#include "src/tuner/evaluator.h"

typedef struct probe_gpu {
    tuned__config *cfgs;
    tuned__eval_result *res;
    int ncfg;
    tuned__driver *d;
    tuned__nvrtc *n;
    tuned__gpu gpu;
} probe_gpu;

/* Parses the ncfg config texts and loads the driver, NVRTC and GPU 0; 0,
 * or -1 after printing why on stderr, prefixed by prog. probe_gpu_close
 * frees what either left, whatever it returned. */
int probe_gpu_open(probe_gpu *p, const char *prog, char **texts, int ncfg);
void probe_gpu_close(probe_gpu *p);

#endif
