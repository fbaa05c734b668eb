/* lce_reference.c: the host float64 linear cross-entropy (see
 * lce_reference.h). */
#include "src/driver/lce_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/rng.h"

double tuned__check_bits_to_double(const unsigned char *p, tuned_dtype dtype);

/* The dtype's relative rounding (half an ulp is eps / 2). */
static double dtype_eps(tuned_dtype dtype)
{
    return dtype == TUNED_BF16 ? 0x1p-8 : dtype == TUNED_FP16 ? 0x1p-11 : 0x1p-20;
}

void tuned__lce_ref_free(tuned__lce_ref *r)
{
    free(r->h);
    free(r->w);
    free(r->labels);
    free(r->loss);
    free(r->dh);
    free(r->dw);
    free(r->dh_mag);
    free(r->dw_mag);
    memset(r, 0, sizeof *r);
}

int tuned__lce_ref_make(tuned__lce_ref *r, uint64_t tokens, uint64_t hidden, uint64_t vocab,
                        tuned_dtype dtype, uint64_t seed, tuned__err *e)
{
    memset(r, 0, sizeof *r);
    if (tokens < 1 || hidden < 1 || vocab < 2 || tokens * hidden > (1u << 24) ||
        vocab * hidden > (1u << 24))
        return tuned__errf(e, TUNED_EINVAL, "lce check: instance %llux%llu hidden %llu",
                           (unsigned long long)tokens, (unsigned long long)vocab,
                           (unsigned long long)hidden);
    r->tokens = tokens, r->hidden = hidden, r->vocab = vocab, r->dtype = dtype;
    r->h = malloc(tokens * hidden * sizeof *r->h);
    r->w = malloc(vocab * hidden * sizeof *r->w);
    r->labels = malloc(tokens * sizeof *r->labels);
    r->loss = calloc(tokens, sizeof *r->loss);
    r->dh = calloc(tokens * hidden, sizeof *r->dh);
    r->dw = calloc(vocab * hidden, sizeof *r->dw);
    r->dh_mag = calloc(tokens * hidden, sizeof *r->dh_mag);
    r->dw_mag = calloc(vocab * hidden, sizeof *r->dw_mag);
    double *logits = malloc(vocab * sizeof *logits);
    if (r->h == NULL || r->w == NULL || r->labels == NULL || r->loss == NULL || r->dh == NULL ||
        r->dw == NULL || r->dh_mag == NULL || r->dw_mag == NULL || logits == NULL) {
        free(logits);
        tuned__lce_ref_free(r);
        return tuned__errf(e, TUNED_ENOMEM, "lce check: out of memory");
    }
    tuned__rng rng = {.state = seed};
    for (uint64_t i = 0; i < tokens * hidden; i++)
        r->h[i] = ((double)tuned__rng_below(&rng, 129) - 64.0) / 64.0;
    for (uint64_t i = 0; i < vocab * hidden; i++)
        r->w[i] = ((double)tuned__rng_below(&rng, 129) - 64.0) / 64.0;
    uint64_t valid = 0;
    for (uint64_t t = 0; t < tokens; t++) {
        /* every seventh row ignored, as padding is */
        r->labels[t] = t % 7 == 3 ? TUNED__LCE_IGNORE_INDEX
                                  : (int64_t)tuned__rng_below(&rng, vocab);
        valid += r->labels[t] != TUNED__LCE_IGNORE_INDEX;
    }
    r->gscale = valid > 0 ? 1.0 / (double)valid : 0.0;
    for (uint64_t t = 0; t < tokens; t++) {
        const double *ht = r->h + t * hidden;
        double m = -INFINITY, s = 0;
        for (uint64_t v = 0; v < vocab; v++) {
            const double *wv = r->w + v * hidden;
            double z = 0;
            for (uint64_t j = 0; j < hidden; j++)
                z += ht[j] * wv[j];
            logits[v] = z;
            m = fmax(m, z);
            r->max_logit = fmax(r->max_logit, fabs(z));
        }
        for (uint64_t v = 0; v < vocab; v++)
            s += exp(logits[v] - m);
        double lse = m + log(s);
        int64_t y = r->labels[t];
        if (y == TUNED__LCE_IGNORE_INDEX)
            continue;
        r->loss[t] = lse - logits[y];
        for (uint64_t v = 0; v < vocab; v++) {
            double p = exp(logits[v] - lse);
            double g = r->gscale * (p - (v == (uint64_t)y));
            double gm = r->gscale * (p + (v == (uint64_t)y));
            const double *wv = r->w + v * hidden;
            double *dht = r->dh + t * hidden, *dhm = r->dh_mag + t * hidden;
            double *dwv = r->dw + v * hidden, *dwm = r->dw_mag + v * hidden;
            for (uint64_t j = 0; j < hidden; j++) {
                dht[j] += g * wv[j];
                dhm[j] += gm * fabs(wv[j]);
                dwv[j] += g * ht[j];
                dwm[j] += gm * fabs(ht[j]);
            }
        }
    }
    free(logits);
    return 0;
}

/* Counts the values of one gradient outside their bound; the first into
 * detail when it is still empty. */
static uint64_t compare_grad(const char *name, const double *ref, const double *mag,
                             const unsigned char *got, uint64_t count, uint64_t hidden,
                             tuned_dtype dtype, double rel, char *detail, size_t n)
{
    size_t esize = tuned_dtype_size(dtype);
    double eps = dtype_eps(dtype);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < count; i++) {
        double g = tuned__check_bits_to_double(got + i * esize, dtype);
        double bound = rel * mag[i] + eps * fabs(ref[i]) + 1e-30;
        if (!(fabs(g - ref[i]) <= bound)) {
            if (bad++ == 0 && detail != NULL && n > 0 && detail[0] == '\0')
                snprintf(detail, n, "%s[%llu][%llu] = %.9g, float64 %.9g (bound %.3g)", name,
                         (unsigned long long)(i / hidden), (unsigned long long)(i % hidden), g,
                         ref[i], bound);
        }
    }
    return bad;
}

uint64_t tuned__lce_ref_compare(const tuned__lce_ref *r, const float *loss, const void *dh,
                                const void *dw, uint64_t chunk, uint64_t blocks, char *detail,
                                size_t n)
{
    if (detail != NULL && n > 0)
        detail[0] = '\0';
    double eps = dtype_eps(r->dtype);
    /* A logit is rounded once (relative eps of up to max_logit); the loss
     * moves by at most twice that; the gradient of the logits carries the
     * same and its own rounding. d W is rounded again each chunk it
     * crosses (summed in the dtype, as torch's addmm does), d h each
     * vocabulary block after the first. */
    double logit_err = eps * (1.0 + r->max_logit);
    uint64_t chunks = chunk > 0 ? (r->tokens + chunk - 1) / chunk : 1;
    uint64_t bad = 0;
    for (uint64_t t = 0; t < r->tokens; t++) {
        double bound = 4.0 * logit_err + 1e-6 * fabs(r->loss[t]);
        if (!(fabs((double)loss[t] - r->loss[t]) <= bound)) {
            if (bad++ == 0 && detail != NULL && n > 0)
                snprintf(detail, n, "loss[%llu] = %.9g, float64 %.9g (bound %.3g)",
                         (unsigned long long)t, (double)loss[t], r->loss[t], bound);
        }
    }
    double rel = 4.0 * logit_err + 2.0 * eps;
    bad += compare_grad("dh", r->dh, r->dh_mag, dh, r->tokens * r->hidden, r->hidden, r->dtype,
                        rel + (double)(blocks > 1 ? blocks - 1 : 0) * eps, detail, n);
    bad += compare_grad("dw", r->dw, r->dw_mag, dw, r->vocab * r->hidden, r->hidden, r->dtype,
                        rel + (double)chunks * eps, detail, n);
    return bad;
}
