/* policy.h: the name of how this build measures a variant.
 *
 * src/tuner/evaluator.c takes 2 warm-up launches, then per repeat an L2
 * flush, a 100 µs pause and one launch between CUDA events, each repeat
 * waited for before the next is queued, and keeps the median of 5..200
 * repeats within 10 ms of kernel time. Every record carries the policy it
 * was measured under, and a record is served as measured by this build
 * only under the same policy: bump the "/N" when the method changes. /2
 * added the pause; /3 made repeats serial. */
#ifndef TUNED_TUNER_POLICY_H
#define TUNED_TUNER_POLICY_H

#define TUNED__MEASURE_POLICY "l2flush-settle-events-median/3"

#endif
