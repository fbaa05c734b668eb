/* router_reference.h: the MoE router's float64 reference, on the host.
 *
 * One row at a time, in double, from logits already widened to double:
 * what kernels/templates/router_topk.cu computes, by the plainest
 * algorithm (sort, pick), so that the two share nothing but the rules:
 *   score     softmax over the row, sigmoid, or sqrt(softplus)
 *   order     by score + bias with a bias; without one by the logit itself
 *             (every score rises with it, and the logits are exact in both
 *             the kernel and here); NaN above everything, ties to the
 *             lower index; a softmax row whose scores are NaN (a NaN or
 *             +inf logit, or only -inf) orders every expert as NaN
 *   groups    groups consecutive experts, a group scored by the sum of its
 *             two best order values (its one with one expert), the
 *             topk_group best kept (ties to the lower group)
 *   weights   scaling * score of each chosen expert, divided by the chosen
 *             scores' sum with renorm
 *   backward  d logits of sum_i dweights_i * weights_i, through the score
 *             and the renormalisation
 * The GPU check (check_router.c) holds the kernel to it, and the unit test
 * test_router_reference holds it to hand-made rows. */
#ifndef TUNED_DRIVER_ROUTER_REFERENCE_H
#define TUNED_DRIVER_ROUTER_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { TUNED__ROUTER_SOFTMAX = 0, TUNED__ROUTER_SIGMOID = 1, TUNED__ROUTER_SQRT_SOFTPLUS = 2 };

/* The routing a row is computed with (the router kind's key parameters,
 * and the call's scaling). */
typedef struct tuned__router_rule {
    unsigned k, score, groups, topk_group;
    bool renorm;
    double scaling;
} tuned__router_rule;

/* The rule of a router kind's key parameter word (src/codegen/kind.h). */
tuned__router_rule tuned__router_rule_of(uint32_t params, double scaling);

/* Most experts a row may have. */
#define TUNED__ROUTER_MAX_EXPERTS 2048

/* Scores of the row x (cols values) into score (cols). */
void tuned__router_scores(const double *x, unsigned cols, unsigned score_fn, double *score);

/* The order value of each expert (order: cols values) as the rule above
 * says, and its v (score + bias, or the score; NaN across a softmax row
 * whose scores are NaN), which groups are scored by, from x, its scores
 * and bias (NULL: none). */
void tuned__router_order(const double *x, const double *score, const double *bias,
                         unsigned cols, unsigned score_fn, double *order, double *v);

/* The forward of one row: ids (k) in choice order (by order, among the
 * experts of the kept groups, scored by v), and each group's kept flag
 * into kept (groups; NULL when not wanted). Returns the margin of the
 * group choice: the gap between the last kept group's score and the best
 * dropped one's, relative to the kept one's magnitude (at least 1;
 * INFINITY without groups), which a check compares with its rounding to
 * know whether a kernel may have kept another group (sqrt-softplus scores
 * of logits near 1e10 are near 1e5: fp32 rounds their sums by 0.01). */
double tuned__router_choose(const double *order, const double *v, unsigned cols,
                            const tuned__router_rule *r, long long *ids, bool *kept);

/* The weights (k) of the chosen ids from the row x and its scores; with
 * renorm formed from the log scores (the scores' ratios, also where the
 * scores themselves underflow). */
void tuned__router_weights(const double *x, const double *score, const long long *ids,
                           const tuned__router_rule *r, double *weights);

/* The backward of one row: dx (cols) from x, the chosen ids (k, each in
 * [0, cols)) and dweights (k); mag (cols, may be NULL) gets each
 * element's magnitude, the sum of the absolute terms dx is formed from,
 * which bounds its rounding. score: cols doubles of room. A renormalised
 * softmax row whose softmax is NaN (a NaN, a +inf, every logit -inf) gets
 * NaN at the chosen, whichever ids are given: its forward's weights are
 * NaN. */
void tuned__router_backward(const double *x, const long long *ids, const double *dweights,
                            unsigned cols, const tuned__router_rule *r, double *score,
                            double *dx, double *mag);

/* Whether order value a comes before b (a at index ia, b at ib): larger
 * first, NaN above everything, ties to the lower index. */
bool tuned__router_before(double a, size_t ia, double b, size_t ib);

#endif
