/* probe_shape.h: the shape argument the bench's C probes take
 * (probe_settle, probe_attrs, sass_diff): "[KERNEL:]ROWSxCOLS[:PARAMS]",
 * KERNEL one of tuned__kernel_parse's names (softmax when absent), PARAMS
 * the kind's key parameters (router_topk:64x384:k=8,score=sigmoid). Not
 * installed. */
#ifndef TUNED_BENCH_PROBE_SHAPE_H
#define TUNED_BENCH_PROBE_SHAPE_H

#include "src/codegen/config.h"

/* Sets s's kernel, rows, cols and key parameters from text (its dtype
 * untouched); 0, or -1 when text is not such a shape. */
int probe_parse_shape(const char *text, tuned__shape *s);

#endif
