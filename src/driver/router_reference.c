/* router_reference.c: the MoE router's float64 reference (router_reference.h):
 * scores, the order, the (grouped) choice by repeated scans, the weights
 * and the backward, in double, one row at a time. Plain on purpose: it
 * shares no algorithm with the kernel (warp argmax rounds over integer
 * keys), only the rules. */
#include "src/driver/router_reference.h"

#include <math.h>
#include <string.h>

#include "src/codegen/kind.h"

tuned__router_rule tuned__router_rule_of(uint32_t params, double scaling)
{
    const tuned__kind_spec *k = tuned__kind(TUNED_KERNEL_ROUTER_TOPK);
    tuned__router_rule r = {
        .k = tuned__params_value(k, params, "k", 1),
        .score = tuned__params_value(k, params, "score", 0),
        .groups = tuned__params_value(k, params, "groups", 1),
        .topk_group = tuned__params_value(k, params, "topk_group", 1),
        .renorm = tuned__params_value(k, params, "renorm", 0) != 0,
        .scaling = scaling,
    };
    return r;
}

static double sigmoid(double x)
{
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

static double softplus(double x)
{
    return x > 30.0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

void tuned__router_scores(const double *x, unsigned cols, unsigned score_fn, double *score)
{
    if (score_fn != TUNED__ROUTER_SOFTMAX) {
        for (unsigned j = 0; j < cols; j++)
            score[j] = score_fn == TUNED__ROUTER_SIGMOID ? sigmoid(x[j]) : sqrt(softplus(x[j]));
        return;
    }
    /* The maximum: NaN if any is NaN (then every score is NaN). */
    double m = -INFINITY;
    bool nan = false;
    for (unsigned j = 0; j < cols; j++) {
        nan |= isnan(x[j]);
        m = x[j] > m ? x[j] : m;
    }
    double sum = 0;
    for (unsigned j = 0; j < cols; j++) {
        score[j] = nan ? NAN : exp(x[j] - m); /* +inf - +inf and -inf - -inf: NaN */
        sum += score[j];
    }
    for (unsigned j = 0; j < cols; j++)
        score[j] /= sum;
}

void tuned__router_order(const double *x, const double *score, const double *bias,
                         unsigned cols, unsigned score_fn, double *order, double *v)
{
    bool nan_row = false;
    if (score_fn == TUNED__ROUTER_SOFTMAX)
        for (unsigned j = 0; j < cols; j++)
            nan_row |= isnan(score[j]);
    for (unsigned j = 0; j < cols; j++) {
        v[j] = nan_row ? NAN : bias != NULL ? score[j] + bias[j] : score[j];
        order[j] = nan_row || bias != NULL ? v[j] : x[j];
    }
}

bool tuned__router_before(double a, size_t ia, double b, size_t ib)
{
    bool na = isnan(a), nb = isnan(b);
    if (na || nb)
        return na && (!nb || ia < ib);
    return a > b || (a == b && ia < ib);
}

/* The best of order over [lo, hi) not yet taken; -1 if none. */
static long best_of(const double *order, const bool *taken, unsigned lo, unsigned hi)
{
    long best = -1;
    for (unsigned j = lo; j < hi; j++)
        if (!taken[j] && (best < 0 || tuned__router_before(order[j], j, order[best], (size_t)best)))
            best = j;
    return best;
}

double tuned__router_choose(const double *order, const double *v, unsigned cols,
                            const tuned__router_rule *r, long long *ids, bool *kept)
{
    bool taken[TUNED__ROUTER_MAX_EXPERTS];
    bool keep[64];
    double margin = INFINITY;
    unsigned groups = r->groups > 1 ? r->groups : 1, size = cols / groups;
    for (unsigned j = 0; j < cols; j++)
        taken[j] = false;
    for (unsigned g = 0; g < groups; g++)
        keep[g] = true;
    if (groups > 1) {
        /* Each group's score: the sum of its two largest v. */
        double gscore[64];
        bool gtaken[64];
        for (unsigned g = 0; g < groups; g++) {
            long a = best_of(v, taken, g * size, (g + 1) * size);
            double s = v[a];
            if (size > 1) {
                taken[a] = true;
                s += v[best_of(v, taken, g * size, (g + 1) * size)];
                taken[a] = false;
            }
            gscore[g] = s;
            gtaken[g] = false;
            keep[g] = false;
        }
        double last_kept = INFINITY;
        for (unsigned i = 0; i < r->topk_group; i++) {
            long b = best_of(gscore, gtaken, 0, groups);
            gtaken[b] = keep[b] = true;
            last_kept = gscore[b];
        }
        long next = best_of(gscore, gtaken, 0, groups);
        if (next >= 0) {
            /* an infinite gap stays infinite (not inf / inf) */
            double gap = last_kept - gscore[next];
            margin = isnan(last_kept) || isnan(gscore[next]) ? 0.0
                     : isinf(gap)                            ? gap
                                                             : gap / fmax(1.0, fabs(last_kept));
        }
        for (unsigned j = 0; j < cols; j++)
            taken[j] = !keep[j / size];
    }
    for (unsigned i = 0; i < r->k; i++) {
        long b = best_of(order, taken, 0, cols);
        ids[i] = b;
        if (b >= 0)
            taken[b] = true;
    }
    if (kept != NULL)
        memcpy(kept, keep, groups * sizeof *kept);
    return margin;
}

/* log f(x) up to a constant of the row (softmax: x): renormalised weights
 * are exp(l_i - L) / sum_m exp(l_m - L), L the largest chosen l, which is
 * s_i / sum s where the scores are representable and its limit where
 * they underflow (a sigmoid of -1e30: every chosen weight 1/k, not 0/0). */
static double log_score(double x, unsigned score_fn)
{
    if (score_fn == TUNED__ROUTER_SOFTMAX)
        return x;
    if (score_fn == TUNED__ROUTER_SIGMOID)
        return fmin(x, 0.0) - log1p(exp(-fabs(x)));
    return x < -30.0 ? 0.5 * x : 0.5 * log(softplus(x));
}

/* The renormalised shares q (k) of the chosen ids of row x: the softmax
 * of their log scores. */
static void shares(const double *x, const long long *ids, unsigned k, unsigned score_fn,
                   double *q)
{
    double top = -INFINITY, sum = 0;
    bool nan = false;
    for (unsigned i = 0; i < k; i++) {
        q[i] = log_score(x[ids[i]], score_fn);
        nan |= isnan(q[i]);
        top = q[i] > top ? q[i] : top;
    }
    for (unsigned i = 0; i < k; i++) {
        q[i] = nan ? NAN : exp(q[i] - top); /* +inf - +inf: NaN */
        sum += q[i];
    }
    for (unsigned i = 0; i < k; i++)
        q[i] /= sum;
}

void tuned__router_weights(const double *x, const double *score, const long long *ids,
                           const tuned__router_rule *r, double *weights)
{
    if (!r->renorm) {
        for (unsigned i = 0; i < r->k; i++)
            weights[i] = r->scaling * score[ids[i]];
        return;
    }
    shares(x, ids, r->k, r->score, weights);
    /* a softmax row whose scores are NaN keeps NaN weights */
    bool nan_row = false;
    for (unsigned i = 0; r->score == TUNED__ROUTER_SOFTMAX && i < r->k; i++)
        nan_row |= isnan(score[ids[i]]);
    for (unsigned i = 0; i < r->k; i++)
        weights[i] = nan_row ? NAN : r->scaling * weights[i];
}

/* The derivative of the score at x (sigmoid, sqrt-softplus). */
static double score_slope(double x, unsigned score_fn)
{
    double s = sigmoid(x);
    if (score_fn == TUNED__ROUTER_SIGMOID)
        return s * (1.0 - s);
    return s / (2.0 * sqrt(softplus(x)));
}

void tuned__router_backward(const double *x, const long long *ids, const double *dweights,
                            unsigned cols, const tuned__router_rule *r, double *score,
                            double *dx, double *mag)
{
    double c = r->scaling;
    for (unsigned j = 0; j < cols; j++) {
        dx[j] = 0;
        if (mag != NULL)
            mag[j] = 0;
    }
    if (r->score == TUNED__ROUTER_SOFTMAX && !r->renorm) {
        /* w_i = c p_{id_i}: dx_j = c p_j (g_j - sum_i g_i p_{id_i}) */
        tuned__router_scores(x, cols, TUNED__ROUTER_SOFTMAX, score);
        double s = 0, sa = 0;
        for (unsigned i = 0; i < r->k; i++) {
            s += dweights[i] * score[ids[i]];
            sa += fabs(dweights[i] * score[ids[i]]);
        }
        for (unsigned j = 0; j < cols; j++) {
            dx[j] = -c * score[j] * s;
            if (mag != NULL)
                mag[j] = fabs(c * score[j]) * sa;
        }
        for (unsigned i = 0; i < r->k; i++) {
            dx[ids[i]] += c * score[ids[i]] * dweights[i];
            if (mag != NULL)
                mag[ids[i]] += fabs(c * score[ids[i]] * dweights[i]);
        }
        return;
    }
    if (r->score == TUNED__ROUTER_SOFTMAX) {
        /* the softmax over the chosen logits q: dx_{id_i} = c q_i (g_i - sum_m g_m q_m);
         * NaN for the chosen where the row's softmax is NaN (a NaN, a +inf
         * or every logit -inf, whichever ids are given), as the forward's
         * weights are there */
        tuned__router_scores(x, cols, TUNED__ROUTER_SOFTMAX, score);
        if (isnan(score[0])) {
            for (unsigned i = 0; i < r->k; i++)
                dx[ids[i]] = NAN;
            return;
        }
        double m = -INFINITY, sum = 0, s = 0, sa = 0;
        for (unsigned i = 0; i < r->k; i++)
            m = x[ids[i]] > m || isnan(x[ids[i]]) ? x[ids[i]] : m;
        for (unsigned i = 0; i < r->k; i++)
            sum += exp(x[ids[i]] - m);
        for (unsigned i = 0; i < r->k; i++) {
            double q = exp(x[ids[i]] - m) / sum;
            s += dweights[i] * q;
            sa += fabs(dweights[i] * q);
        }
        for (unsigned i = 0; i < r->k; i++) {
            double q = exp(x[ids[i]] - m) / sum;
            dx[ids[i]] += c * q * (dweights[i] - s);
            if (mag != NULL)
                mag[ids[i]] += fabs(c * q) * (fabs(dweights[i]) + sa);
        }
        return;
    }
    /* sigmoid, sqrt-softplus, per chosen expert: without renorm
     * dx = c g f'(x); with it, q the shares (s_i / sum s) and f'/f the
     * log score's slope, dx_m = c q_m (g_m - sum_i g_i q_i) f'/f(x_m) */
    double q[64], gq = 0, gqa = 0;
    if (r->renorm) {
        shares(x, ids, r->k, r->score, q);
        for (unsigned i = 0; i < r->k; i++) {
            gq += dweights[i] * q[i];
            gqa += fabs(dweights[i] * q[i]);
        }
    }
    for (unsigned i = 0; i < r->k; i++) {
        double xi = x[ids[i]], d, a;
        if (!r->renorm) {
            d = c * dweights[i] * score_slope(xi, r->score);
            a = fabs(d);
        } else {
            double slope = r->score == TUNED__ROUTER_SIGMOID ? sigmoid(-xi)
                           : xi < -30.0                     ? 0.5
                                             : sigmoid(xi) / (2.0 * softplus(xi));
            d = c * q[i] * (dweights[i] - gq) * slope;
            a = fabs(c * q[i] * slope) * (fabs(dweights[i]) + gqa);
        }
        dx[ids[i]] += d;
        if (mag != NULL)
            mag[ids[i]] += a;
    }
}
