/* test_router.c: the router kinds on the CPU.
 *
 *   params     the key parameters' text, defaults, ranges and the rule
 *              against the experts; the key's text and bytes with them (a
 *              softmax key's unchanged)
 *   reference  the float64 router (src/driver/router_reference.c) on
 *              hand-made rows: order and ties, NaN, a NaN softmax row,
 *              groups, the bias moving the choice and not the weight,
 *              renormalised weights; its backward against central
 *              differences of its forward, for each score and renorm
 *   compile    router_topk and router_topk_bwd variants through codegen and
 *              NVRTC (PTX, sm_90) over the expert counts, k, scores,
 *              groups, renorm and dtypes, and the configs the kind refuses
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "cache/key.h"
#include "src/codegen/config.h"
#include "src/codegen/nvrtc.h"
#include "src/codegen/source.h"
#include "src/driver/launch.h"
#include "src/driver/router_reference.h"
#include "src/tuner/space.h"

static const tuned__kind_spec *router(void)
{
    return tuned__kind(TUNED_KERNEL_ROUTER_TOPK);
}

static void test_params(void)
{
    const tuned__kind_spec *k = router();
    tuned__err e = {0};
    uint32_t w = 0;
    char text[128], why[192];
    EXPECT_RC(tuned__params_parse(k, "", &w, &e), 0, &e);
    EXPECT(w == tuned__params_default(k) && tuned__params_value(k, w, "k", 0) == 8,
           "defaults: 0x%x", (unsigned)w);
    tuned__params_format(k, w, text, sizeof text);
    EXPECT(text[0] == '\0', "defaults print as nothing: '%s'", text);
    EXPECT_RC(tuned__params_parse(k, "k=6,score=sigmoid,groups=8,topk_group=4,renorm=1", &w, &e),
              0, &e);
    tuned__params_format(k, w, text, sizeof text);
    EXPECT(strcmp(text, "k=6,score=sigmoid,groups=8,topk_group=4,renorm=1") == 0, "'%s'", text);
    EXPECT(tuned__params_check(k, 256, w, why, sizeof why), "%s", why);
    static const char *const bad_text[] = {"k", "q=1", "score=relu", "k=x", "k=-1", "k=999"};
    for (size_t i = 0; i < sizeof bad_text / sizeof bad_text[0]; i++)
        EXPECT(tuned__params_parse(k, bad_text[i], &w, &e) == TUNED_EINVAL &&
                   strstr(e.msg, "router_topk") != NULL,
               "'%s' taken: %s", bad_text[i], e.msg);
    static const struct {
        const char *text;
        uint64_t cols;
        const char *says;
    } refused[] = {
        {"k=0", 128, "k 0 out of range"},          {"k=65", 128, "k 65 out of range"},
        {"k=9", 8, "more than the 8 experts"},      {"groups=7", 128, "do not divide"},
        {"groups=4,topk_group=5", 128, "more than the 4 groups"},
        {"groups=8,topk_group=1,k=20", 128, "kept groups"}, {"", 4096, "2 to 2048"},
        {"k=1", 1, "2 to 2048"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        EXPECT_RC(tuned__params_parse(k, refused[i].text, &w, &e), 0, &e);
        why[0] = '\0';
        EXPECT(!tuned__params_check(k, refused[i].cols, w, why, sizeof why) &&
                   strstr(why, refused[i].says) != NULL,
               "'%s' on %llu experts: '%s'", refused[i].text,
               (unsigned long long)refused[i].cols, why);
    }
    /* The forward's bias: a parameter of its key, set from the call's
     * pointer; the timing passes the bias tensor where it is 1. */
    {
        const tuned__kind_spec *bwd = tuned__kind(TUNED_KERNEL_ROUTER_TOPK_BWD);
        EXPECT_RC(tuned__params_parse(k, "score=sigmoid,bias=1", &w, &e), 0, &e);
        tuned__params_format(k, w, text, sizeof text);
        EXPECT(strcmp(text, "score=sigmoid,bias=1") == 0, "'%s'", text);
        int bi = -1;
        for (unsigned i = 0; i < k->ntensors; i++)
            if (strcmp(k->tensor[i].name, "bias") == 0)
                bi = (int)i;
        EXPECT(bi >= 0 && tuned__tensor_timed(k, (unsigned)bi, w) &&
                   !tuned__tensor_timed(k, (unsigned)bi, tuned__params_default(k)) &&
                   !tuned__tensor_timed(k, 4, w) && tuned__tensor_timed(k, 0, w),
               "the timed tensors of bias=1");
        const float one = 1.0f;
        const void *with[] = {&one, &one, &one, &one, NULL, NULL};
        const void *without[] = {&one, NULL, &one, &one, &one, &one};
        uint32_t d = tuned__params_default(k);
        EXPECT(tuned__params_value(k, tuned__params_present(k, d, with), "bias", 9) == 1 &&
                   tuned__params_value(k, tuned__params_present(k, w, without), "bias", 9) == 0,
               "bias from the pointer");
        EXPECT(tuned__params_parse(bwd, "bias=1", &w, &e) == TUNED_EINVAL,
               "the backward's key took a bias");
    }
    /* a kind without parameters takes none */
    const tuned__kind_spec *sm = tuned__kind(TUNED_KERNEL_SOFTMAX);
    EXPECT(tuned__params_default(sm) == 0 && tuned__params_check(sm, 4096, 0, NULL, 0) &&
               !tuned__params_check(sm, 4096, 1, NULL, 0) &&
               tuned__params_parse(sm, "k=8", &w, &e) == TUNED_EINVAL,
           "softmax and parameters");

    /* Keys: the parameters ride above bit 32 of cols; text names them. */
    tuned__shape s = {.dtype = TUNED_FP32, .rows = 16384, .cols = 128,
                      .kernel = TUNED_KERNEL_ROUTER_TOPK};
    EXPECT_RC(tuned__params_parse(k, "k=8,score=sigmoid", &s.params, &e), 0, &e);
    tuned__store_key key = tuned__store_key_of(&s, 0x0123456789abcdefull);
    char ks[TUNED__KEY_TEXT];
    tuned__key_format(ks, sizeof ks, &key);
    EXPECT(strcmp(ks, "router_topk/fp32/16384x128:score=sigmoid/dense/0123456789abcdef") == 0,
           "key text %s", ks);
    tuned__store_key back;
    EXPECT_RC(tuned__key_parse(ks, &back, &e), 0, &e);
    EXPECT(memcmp(&back, &key, sizeof key) == 0, "key text round trip %s", ks);
    tuned__shape again = tuned__store_key_shape(&back);
    EXPECT(again.cols == 128 && again.params == s.params, "shape from key: %llu, 0x%x",
           (unsigned long long)again.cols, (unsigned)again.params);
    uint8_t bytes[TUNED__KEY_LEN];
    tuned__key_encode(bytes, TUNED__KEY_TAG_BEST, &key);
    tuned__store_key decoded;
    EXPECT_RC(tuned__key_decode(bytes, sizeof bytes, TUNED__KEY_TAG_BEST, &decoded, &e), 0, &e);
    EXPECT(decoded.cols == key.cols, "key bytes round trip");
    tuned__shape sm_shape = {.dtype = TUNED_FP16, .rows = 4096, .cols = 32000,
                             .kernel = TUNED_KERNEL_SOFTMAX};
    key = tuned__store_key_of(&sm_shape, 0x0123456789abcdefull);
    tuned__key_format(ks, sizeof ks, &key);
    EXPECT(strcmp(ks, "softmax/fp16/4096x32000/dense/0123456789abcdef") == 0 && key.cols == 32000,
           "a softmax key changed: %s", ks);
    EXPECT(tuned__key_parse("router_topk/fp32/16384x128:k=99/dense/0123456789abcdef", &back,
                            &e) == TUNED_EINVAL ||
               !tuned__shape_check(&(tuned__shape){.dtype = TUNED_FP32, .rows = 1, .cols = 128,
                                                   .kernel = TUNED_KERNEL_ROUTER_TOPK,
                                                   .params = 99},
                                   NULL, 0),
           "k 99 taken");
}

/* ---- the reference on hand-made rows ---- */

static tuned__router_rule rule(unsigned k, unsigned score, unsigned groups, unsigned kept,
                               bool renorm)
{
    tuned__router_rule r = {k, score, groups, kept, renorm, 0.75};
    return r;
}

/* ids of row x (cols) under r, bias or NULL. */
static void choose(const double *x, const double *bias, unsigned cols, const tuned__router_rule *r,
                   long long *ids, double *weights)
{
    double score[64], order[64], v[64];
    tuned__router_scores(x, cols, r->score, score);
    tuned__router_order(x, score, bias, cols, r->score, order, v);
    tuned__router_choose(order, v, cols, r, ids, NULL);
    if (weights != NULL)
        tuned__router_weights(x, score, ids, r, weights);
}

static void test_reference(void)
{
    long long ids[8];
    double w[8];
    /* ties to the lower index; weights the scaled softmax */
    double x1[] = {1, 3, 2, 3};
    tuned__router_rule r = rule(3, TUNED__ROUTER_SOFTMAX, 1, 1, false);
    choose(x1, NULL, 4, &r, ids, w);
    double sum = exp(1) + 2 * exp(3) + exp(2);
    EXPECT(ids[0] == 1 && ids[1] == 3 && ids[2] == 2, "ties: %lld %lld %lld", ids[0], ids[1],
           ids[2]);
    EXPECT(fabs(w[0] - 0.75 * exp(3) / sum) < 1e-15 && fabs(w[2] - 0.75 * exp(2) / sum) < 1e-15,
           "softmax weights %g %g", w[0], w[2]);
    /* renorm: the weights sum to the scaling */
    r.renorm = true;
    choose(x1, NULL, 4, &r, ids, w);
    EXPECT(fabs(w[0] + w[1] + w[2] - 0.75) < 1e-15, "renormalised sum %g", w[0] + w[1] + w[2]);
    /* NaN above everything (sigmoid, no bias: ordered by the logits) */
    double x2[] = {0, NAN, 5, NAN};
    r = rule(3, TUNED__ROUTER_SIGMOID, 1, 1, false);
    choose(x2, NULL, 4, &r, ids, w);
    EXPECT(ids[0] == 1 && ids[1] == 3 && ids[2] == 2 && isnan(w[0]) &&
               fabs(w[2] - 0.75 / (1 + exp(-5))) < 1e-15,
           "NaN order: %lld %lld %lld", ids[0], ids[1], ids[2]);
    /* a softmax row with +inf: every score NaN, the lowest indices */
    double x3[] = {0, 1, INFINITY, 2};
    r = rule(2, TUNED__ROUTER_SOFTMAX, 1, 1, false);
    choose(x3, NULL, 4, &r, ids, w);
    EXPECT(ids[0] == 0 && ids[1] == 1 && isnan(w[0]), "a NaN softmax row: %lld %lld", ids[0],
           ids[1]);
    /* the bias moves the choice, not the weight */
    double x4[] = {0.0, 0.1, -0.2, 0.05};
    double bias[] = {0.0, 0.0, 0.5, 0.0};
    r = rule(1, TUNED__ROUTER_SIGMOID, 1, 1, false);
    choose(x4, bias, 4, &r, ids, w);
    EXPECT(ids[0] == 2 && fabs(w[0] - 0.75 / (1 + exp(0.2))) < 1e-15, "bias: %lld, %g", ids[0],
           w[0]);
    /* groups: 4 groups of 2, the best 2 groups by the sum of their two */
    double x5[] = {5, -5, 1, 1, 0.5, 0.5, 4, -4};
    /* sigmoid sums: g0 ~ 1.0, g1 ~ 1.46, g2 ~ 1.25, g3 ~ 1.0: g1 and g2 kept */
    r = rule(3, TUNED__ROUTER_SIGMOID, 4, 2, false);
    choose(x5, NULL, 8, &r, ids, w);
    EXPECT(ids[0] == 2 && ids[1] == 3 && ids[2] == 4, "groups: %lld %lld %lld", ids[0], ids[1],
           ids[2]);
    r = rule(3, TUNED__ROUTER_SIGMOID, 1, 1, false);
    choose(x5, NULL, 8, &r, ids, w);
    EXPECT(ids[0] == 0 && ids[1] == 6 && ids[2] == 2, "no groups: %lld %lld %lld", ids[0],
           ids[1], ids[2]);
    /* the group choice's margin, relative to the kept score: group scores
     * near 2e5 a hundredth apart are a rounding tie of fp32, an infinite
     * one apart stays infinite */
    {
        double v[4] = {1e5, 1e5, 1e5, 0.99999995e5}, order[4];
        memcpy(order, v, sizeof order);
        r = rule(2, TUNED__ROUTER_SQRT_SOFTPLUS, 2, 1, false);
        double margin = tuned__router_choose(order, v, 4, &r, ids, NULL);
        EXPECT(margin > 0 && margin < 1e-7, "margin near 2e5: %g", margin);
        v[0] = v[1] = order[0] = order[1] = INFINITY;
        margin = tuned__router_choose(order, v, 4, &r, ids, NULL);
        EXPECT(isinf(margin) && margin > 0, "an infinite margin: %g", margin);
    }

    /* renormalised weights from the log scores: sigmoids that underflow
     * share the weight, not 0 / 0 */
    double x6[] = {-1e30, -1e30, -3e30};
    r = rule(2, TUNED__ROUTER_SIGMOID, 1, 1, true);
    choose(x6, NULL, 3, &r, ids, w);
    EXPECT(ids[0] == 0 && ids[1] == 1 && w[0] == 0.375 && w[1] == 0.375,
           "underflowing sigmoids: %lld %lld %g %g", ids[0], ids[1], w[0], w[1]);
    /* a renormalised softmax row with a +inf outside the given ids: its
     * softmax (and so its forward's weights) is NaN, and so is the
     * gradient at the chosen; the others stay 0 */
    {
        double x7[] = {0.5, INFINITY, -1.0, 2.0}, dw7[] = {0.25, -0.5}, dx7[4], work7[4];
        long long ids7[] = {3, 0};
        r = rule(2, TUNED__ROUTER_SOFTMAX, 1, 1, true);
        tuned__router_backward(x7, ids7, dw7, 4, &r, work7, dx7, NULL);
        EXPECT(isnan(dx7[3]) && isnan(dx7[0]) && dx7[1] == 0 && dx7[2] == 0,
               "a +inf row's renormalised gradient: %g %g %g %g", dx7[0], dx7[1], dx7[2],
               dx7[3]);
        x7[1] = 1.0;
        tuned__router_backward(x7, ids7, dw7, 4, &r, work7, dx7, NULL);
        EXPECT(isfinite(dx7[3]) && isfinite(dx7[0]) && dx7[1] == 0 && dx7[2] == 0,
               "a finite row's renormalised gradient: %g %g %g %g", dx7[0], dx7[1], dx7[2],
               dx7[3]);
    }
    /* the backward against central differences of the forward */
    for (unsigned score = 0; score < 3; score++)
        for (int renorm = 0; renorm < 2; renorm++) {
            enum { C = 12, K = 4 };
            double x[C], dw[K], dx[C], mag[C], work[C], sc[C], wp[K], wm[K];
            for (unsigned j = 0; j < C; j++)
                x[j] = sin(3.1 * j + score) * 2.0;
            for (unsigned i = 0; i < K; i++)
                dw[i] = cos(1.7 * i + renorm);
            r = rule(K, score, 1, 1, renorm != 0);
            choose(x, NULL, C, &r, ids, NULL);
            tuned__router_backward(x, ids, dw, C, &r, work, dx, mag);
            double worst = 0;
            for (unsigned j = 0; j < C; j++) {
                double h = 1e-6, keep = x[j];
                x[j] = keep + h;
                tuned__router_scores(x, C, score, sc);
                tuned__router_weights(x, sc, ids, &r, wp);
                x[j] = keep - h;
                tuned__router_scores(x, C, score, sc);
                tuned__router_weights(x, sc, ids, &r, wm);
                x[j] = keep;
                double num = 0;
                for (unsigned i = 0; i < K; i++)
                    num += dw[i] * (wp[i] - wm[i]) / (2 * h);
                worst = fmax(worst, fabs(num - dx[j]));
                EXPECT(fabs(dx[j]) <= mag[j] + 1e-15, "magnitude below |dx|");
            }
            EXPECT(worst < 1e-8, "backward score %u renorm %d: off by %g", score, renorm, worst);
        }
}

/* A named config field's text (sel=, terms=): base with its default
 * value parses but is not canonical (the text leaves the default out),
 * and an unknown value is refused. */
static void expect_field_text(const char *base, const char *field, const char *dflt)
{
    tuned__config c;
    tuned__err e = {0};
    char text[TUNED__CONFIG_TEXT];
    snprintf(text, sizeof text, "%s.%s=%s", base, field, dflt);
    EXPECT(tuned__config_parse(text, &c, &e) == 0 &&
               tuned__config_parse_canonical(text, TUNED_EINVAL, &c, &e) == TUNED_EINVAL,
           "%s=%s is not canonical", field, dflt);
    snprintf(text, sizeof text, "%s.%s=heap", base, field);
    EXPECT(tuned__config_parse(text, &c, &e) == TUNED_EINVAL, "%s=heap taken", field);
}

/* ---- compile ---- */

/* Compiles config for the kind on dt x cols under params, with the
 * compiled-in options flags; false when the kind's rule refuses the config
 * there (a row too long for its threads). */
static bool compile_flags(const tuned__nvrtc *n, unsigned kernel, tuned_dtype dt, uint64_t cols,
                          const char *params, const char *config, unsigned flags)
{
    tuned__shape s = {.dtype = dt, .rows = 4099, .cols = cols, .kernel = (uint8_t)kernel};
    tuned__err e = {0};
    tuned__config c;
    char *src = NULL;
    tuned__blob ptx;
    if (tuned__params_parse(tuned__kind(kernel), params, &s.params, &e) != 0 ||
        tuned__config_parse(config, &c, &e) != 0) {
        EXPECT(0, "%s %s: %s", params, config, e.msg);
        return false;
    }
    if (!tuned__config_check(&c, &s, 90, 132, NULL, 0))
        return false;
    const tuned__codegen_opts opts = {.flags = flags};
    if (tuned__source_kernel(&c, &s, &opts, &src, &e) != 0 ||
        tuned__nvrtc_compile(n, src, config, 90, TUNED__NVRTC_PTX, &ptx, &e) != 0) {
        EXPECT(0, "%s %s x %llu %s %s: %s", tuned__kernel_name((uint8_t)kernel),
               tuned_dtype_name(dt), (unsigned long long)cols, params, config, e.msg);
        free(src);
        return true;
    }
    EXPECT(strstr(ptx.data, kernel == TUNED_KERNEL_ROUTER_TOPK ? ".entry tuned_router_topk("
                                                               : ".entry tuned_router_topk_bwd(")
               != NULL,
           "no entry point in the PTX");
    /* bf16 weights: stores of two bytes (with fp32 logits the module,
     * forward and backward, has none else) */
    if (kernel == TUNED_KERNEL_ROUTER_TOPK && dt == TUNED_FP32)
        EXPECT((strstr(ptx.data, "st.global.u16") != NULL ||
                strstr(ptx.data, "st.global.b16") != NULL) ==
                   ((flags & TUNED__ROUTER_FLAG_WEIGHTS_BF16) != 0),
               "%s with options 0x%x: two-byte stores do not follow bf16 weights", config, flags);
    tuned__blob_free(&ptx);
    free(src);
    return true;
}

static bool compile(const tuned__nvrtc *n, unsigned kernel, tuned_dtype dt, uint64_t cols,
                    const char *params, const char *config)
{
    return compile_flags(n, kernel, dt, cols, params, config, 0);
}

static void test_compile(const tuned__nvrtc *n)
{
    static const struct {
        uint64_t cols;
        const char *params;
    } cases[] = {
        {8, "k=2"}, {60, "k=4,renorm=1"}, {128, ""}, {128, "k=1,score=sigmoid"},
        {160, "k=6,score=sqrt_softplus,renorm=1"},
        {256, "k=8,score=sigmoid,groups=8,topk_group=4,renorm=1"}, {384, "k=8"},
        {2048, "k=64"}, {2048, "k=16,score=sigmoid,groups=32,topk_group=2"},
    };
    static const char *const configs[] = {
        "w1.r32.c1.m1.v1.ld=def.st=def.reg=f32",   /* one thread a row */
        "w4.r16.c1.m2.v4.ld=nc.st=def.reg=f32",    /* 8 threads a row */
        "w8.r8.c1.m1.v2.ld=cs.st=def.reg=f32",     /* a warp a row */
        "w4.r32.c1.m1.v4.ld=def.st=def.reg=f32.sel=sort", /* 4 threads a row, sorted lists */
        "w1.r1.c1.m1.v4.ld=nc.st=def.reg=f32.sel=short",  /* a warp a row, short lists */
        "w4.r16.c1.m1.v4.ld=nc.st=def.reg=f32.sel=net",   /* 8 threads a row, network lists */
        "w1.r1.c1.m1.v4.ld=nc.st=def.reg=f32.sel=net",    /* a warp a row, network lists */
        "w4.r16.c1.m1.v4.ld=def.st=def.reg=f32.sel=merge", /* 8 threads a row, merged lists */
        "w2.r16.c1.m1.v2.ld=cs.st=def.reg=f32.sel=merge",  /* 4 threads a row, merged lists */
        "w4.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank",   /* 128 threads a row, ranks */
    };
    /* Each case in one dtype (they take turns), its configs that fit:
     * NVRTC takes a second or more a router variant, and CI has two cores. */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tuned_dtype dt = (tuned_dtype)(TUNED_FP16 + (int)(i % 3));
        unsigned fwd = 0, bwd = 0;
        for (size_t j = 0; j < sizeof configs / sizeof configs[0]; j++) {
            /* the scan once (the first that fits), sorted lists once, short
             * lists where a thread holds several, network lists at 8
             * threads a row where they fit, else a warp a row, merged
             * lists at 8 threads a row, and at 4 where 8 do not fit
             * (NVRTC's time: the test's) */
            if ((j < 3 && fwd > 0) || (j == 4 && cases[i].cols < 256) ||
                (j == 6 && cases[i].cols <= 512) || (j == 8 && cases[i].cols > 64))
                continue;
            bool made = compile(n, TUNED_KERNEL_ROUTER_TOPK, dt, cases[i].cols, cases[i].params,
                                configs[j]);
            fwd += made;
            if (made && bwd == 0)
                bwd += compile(n, TUNED_KERNEL_ROUTER_TOPK_BWD, dt, cases[i].cols,
                               cases[i].params, configs[j]);
        }
        EXPECT(fwd > 0 && bwd > 0, "%llu experts %s %s: no config compiled",
               (unsigned long long)cases[i].cols, cases[i].params, tuned_dtype_name(dt));
    }
    /* The renormalised terms in the lanes: a warp a row (the winners
     * staged, a biased row's largest logit after the rounds) and 8
     * threads a row, biased and not. */
    static const char *const lanes[] = {
        "w1.r1.c1.m1.v4.ld=nc.st=def.reg=f32.sel=short.terms=lanes",
        "w4.r16.c1.m1.v4.ld=nc.st=def.reg=f32.sel=net.terms=lanes",
    };
    for (size_t j = 0; j < sizeof lanes / sizeof lanes[0]; j++) {
        EXPECT(compile(n, TUNED_KERNEL_ROUTER_TOPK, TUNED_FP32, 384,
                       "k=8,score=sigmoid,renorm=1,bias=1", lanes[j]),
               "384 experts, bias, %s: not compiled", lanes[j]);
        EXPECT(compile(n, TUNED_KERNEL_ROUTER_TOPK, TUNED_BF16, 64, "k=6,renorm=1", lanes[j]),
               "64 experts, %s: not compiled", lanes[j]);
    }
    /* The compiled-in options: int32 ids and bf16 weights, a forward with
     * one, the other and both (the GPU test runs them against float64) */
    for (unsigned flags = 1; flags <= 3; flags++)
        EXPECT(compile_flags(n, TUNED_KERNEL_ROUTER_TOPK, TUNED_FP32, 160,
                             "k=6,score=sigmoid,renorm=1", configs[2], flags),
               "160 experts with options 0x%x: refused", flags);
    /* The selection method's text: the scan left out, sort, short, net, merge
     * and rank named; no other kind takes it. */
    {
        tuned__config c;
        tuned__err e = {0};
        char text[TUNED__CONFIG_TEXT];
        static const struct {
            const char *text;
            unsigned sel;
        } named[] = {{"w4.r32.c1.m1.v4.ld=def.st=def.reg=f32.sel=sort", TUNED__SEL_SORT},
                     {"w4.r32.c1.m1.v4.ld=def.st=def.reg=f32.sel=short", TUNED__SEL_SHORT},
                     {"w4.r16.c1.m1.v4.ld=def.st=def.reg=f32.sel=net", TUNED__SEL_NET},
                     {"w4.r16.c1.m1.v4.ld=def.st=def.reg=f32.sel=merge", TUNED__SEL_MERGE},
                     {"w4.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", TUNED__SEL_RANK}};
        for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
            EXPECT_RC(tuned__config_parse(named[i].text, &c, &e), 0, &e);
            tuned__config_format(&c, text, sizeof text);
            EXPECT(c.sel == named[i].sel && strcmp(text, named[i].text) == 0,
                   "%s round trip: %s", named[i].text, text);
        }
        expect_field_text("w4.r32.c1.m1.v4.ld=def.st=def.reg=f32", "sel", "scan");
        EXPECT_RC(tuned__config_parse("w4.r32.c1.m1.v4.ld=def.st=def.reg=f32.sel=sort", &c, &e), 0,
                  &e);
        tuned__shape sm = {.dtype = TUNED_FP16, .rows = 64, .cols = 4096,
                           .kernel = TUNED_KERNEL_SOFTMAX};
        char why[160] = "";
        EXPECT(!tuned__config_check(&c, &sm, 90, 132, why, sizeof why) &&
                   strstr(why, "sel=sort") != NULL,
               "softmax took sel=sort: %s", why);
        /* the space holds both methods for the router */
        tuned__shape s = {.dtype = TUNED_FP32, .rows = 16384, .cols = 128,
                          .kernel = TUNED_KERNEL_ROUTER_TOPK,
                          .params = tuned__params_default(router())};
        EXPECT(tuned__config_check(&c, &s, 90, 132, why, sizeof why), "router: %s", why);
        /* merged lists keep k entries a thread: k 8 taken, k 16 refused */
        EXPECT_RC(tuned__config_parse("w4.r16.c1.m1.v4.ld=def.st=def.reg=f32.sel=merge", &c, &e),
                  0, &e);
        EXPECT(tuned__config_check(&c, &s, 90, 132, why, sizeof why), "merge at k 8: %s", why);
        EXPECT_RC(tuned__params_parse(router(), "k=16", &s.params, &e), 0, &e);
        EXPECT(!tuned__config_check(&c, &s, 90, 132, why, sizeof why) &&
                   strstr(why, "sel=merge") != NULL,
               "merge at k 16 taken: %s", why);
        /* ranks: a row in one block of 32 to 1024 threads (no more than
         * its experts take), one element a pass, its shared memory within
         * 48 KiB */
        static const struct {
            const char *config;
            uint64_t cols;
            bool taken;
        } ranks[] = {
            {"w4.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", 128, true},
            {"w1.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", 8, true},
            {"w2.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", 8, false},   /* 64 > 32 */
            {"w8.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", 128, false},  /* 256 > 128 */
            {"w1.r2.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", 128, false},  /* 16 threads */
            {"w4.r1.c2.m1.v1.ld=def.st=def.reg=f32.sel=rank", 128, false},  /* a cluster */
            {"w4.r1.c1.m1.v2.ld=def.st=def.reg=f32.sel=rank", 128, false},  /* vectors */
            {"w32.r2.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", 2048, false}, /* 2 x 24 KiB */
            {"w32.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", 2048, true},
        };
        EXPECT_RC(tuned__params_parse(router(), "k=8", &s.params, &e), 0, &e);
        for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
            EXPECT_RC(tuned__config_parse(ranks[i].config, &c, &e), 0, &e);
            s.cols = ranks[i].cols;
            EXPECT(tuned__config_check(&c, &s, 90, 132, why, sizeof why) == ranks[i].taken,
                   "%s at %llu experts: %s (%s)", ranks[i].config,
                   (unsigned long long)ranks[i].cols, ranks[i].taken ? "refused" : "taken", why);
        }
        /* k threads a row or more: k 64 refused at a warp, taken at two */
        EXPECT_RC(tuned__params_parse(router(), "k=64", &s.params, &e), 0, &e);
        s.cols = 128;
        EXPECT_RC(tuned__config_parse("w1.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", &c, &e), 0,
                  &e);
        EXPECT(!tuned__config_check(&c, &s, 90, 132, why, sizeof why) &&
                   strstr(why, "k threads") != NULL,
               "rank at 32 threads, k 64, taken: %s", why);
        EXPECT_RC(tuned__config_parse("w2.r1.c1.m1.v1.ld=def.st=def.reg=f32.sel=rank", &c, &e), 0,
                  &e);
        EXPECT(tuned__config_check(&c, &s, 90, 132, why, sizeof why), "rank at 64 threads, k 64: %s",
               why);
    }
    /* What a row in one warp has not: refused by the one rule. */
    static const char *const refused[] = {
        "w2.r1.c1.m1.v4.ld=def.st=def.reg=f32",   /* 64 threads a row */
        "w1.r1.c2.m1.v4.ld=def.st=def.reg=f32",   /* a cluster */
        "w1.r1.c1.m1.v4.ld=def.st=def.reg=pk",    /* packed registers */
        "w1.r1.c1.m1.v4.ld=def.st=cs.reg=f32",    /* a store hint, forward */
        "w1.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        tuned__shape s = {.dtype = TUNED_FP16, .rows = 64, .cols = 128,
                          .kernel = TUNED_KERNEL_ROUTER_TOPK,
                          .params = tuned__params_default(router())};
        tuned__config c;
        tuned__err e = {0};
        EXPECT_RC(tuned__config_parse(refused[i], &c, &e), 0, &e);
        EXPECT(!tuned__config_check(&c, &s, 90, 132, NULL, 0), "%s taken", refused[i]);
    }
}

/* sel=net at 8 threads a row in blocks of 256 or 512 threads (64
 * registers, one wave of 16384 rows on 132 SMs), and at 128 (91): the
 * configs to time first at 16384 x 128 k 8 (tune --try), in the kind's
 * rules on sm_90. */
static void test_net_configs(void)
{
    static const char *const texts[] = {"w8.r32.c1.m4.v4.ld=def.st=def.reg=f32.sel=net",
                                        "w16.r64.c1.m2.v4.ld=def.st=def.reg=f32.sel=net",
                                        "w4.r16.c1.m1.v4.ld=def.st=def.reg=f32.sel=net"};
    tuned__err e = {0};
    tuned__shape s = {.dtype = TUNED_FP32, .rows = 16384, .cols = 128,
                      .kernel = TUNED_KERNEL_ROUTER_TOPK};
    EXPECT_RC(tuned__params_parse(tuned__kind(TUNED_KERNEL_ROUTER_TOPK), "k=8", &s.params, &e), 0,
              &e);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        tuned__config c;
        char why[200] = "";
        EXPECT_RC(tuned__config_parse(texts[i], &c, &e), 0, &e);
        EXPECT(tuned__config_check(&c, &s, 90, 132, why, sizeof why) &&
                   tuned__config_threads_per_row(&c) == 8,
               "%s at 16384x128 k 8: %s", texts[i], why);
    }
}

/* terms=lanes: its text, where the one rule takes it (a renormalising
 * key, several threads a row, the router), and the space and the
 * search's steps holding it exactly there. */
static void test_terms_configs(void)
{
    static const char *const lanes = "w1.r1.c1.m1.v4.ld=nc.st=def.reg=f32.sel=short.terms=lanes";
    tuned__err e = {0};
    tuned__config c;
    char text[TUNED__CONFIG_TEXT], why[200] = "";
    EXPECT_RC(tuned__config_parse(lanes, &c, &e), 0, &e);
    tuned__config_format(&c, text, sizeof text);
    EXPECT(c.terms == TUNED__TERMS_LANES && c.sel == TUNED__SEL_SHORT && strcmp(text, lanes) == 0,
           "%s round trip: %s", lanes, text);
    EXPECT(tuned__config_parse("w1.r1.c1.m1.v4.ld=nc.st=def.reg=f32.terms=rounds", &c, &e) == 0 &&
               c.terms == TUNED__TERMS_ROUNDS,
           "terms=rounds is not the rounds' terms");
    expect_field_text("w1.r1.c1.m1.v4.ld=nc.st=def.reg=f32", "terms", "rounds");
    /* after sel=, before red=: the text's one order */
    EXPECT(tuned__config_parse("w1.r1.c1.m1.v4.ld=nc.st=def.reg=f32.terms=lanes.sel=short", &c,
                               &e) == TUNED_EINVAL,
           "terms= before sel= taken");

    const tuned__kind_spec *k = router();
    tuned__shape renorm = {.dtype = TUNED_FP32, .rows = 16384, .cols = 384,
                           .kernel = TUNED_KERNEL_ROUTER_TOPK};
    tuned__shape plain = renorm;
    EXPECT_RC(tuned__params_parse(k, "k=8,score=sigmoid,renorm=1,bias=1", &renorm.params, &e), 0,
              &e);
    EXPECT_RC(tuned__params_parse(k, "k=8,score=sigmoid,bias=1", &plain.params, &e), 0, &e);
    EXPECT_RC(tuned__config_parse(lanes, &c, &e), 0, &e);
    EXPECT(tuned__config_check(&c, &renorm, 90, 132, why, sizeof why), "renorm key: %s", why);
    EXPECT(!tuned__config_check(&c, &plain, 90, 132, why, sizeof why) &&
               strstr(why, "renorm") != NULL,
           "a key without renorm took terms=lanes: %s", why);
    tuned__config one = c;
    one.warps = 1, one.rows = 32, one.sel = TUNED__SEL_SCAN; /* one thread a row */
    EXPECT(!tuned__config_check(&one, &renorm, 90, 132, why, sizeof why) &&
               strstr(why, "one thread") != NULL,
           "one thread a row took terms=lanes: %s", why);
    tuned__shape sm = {.dtype = TUNED_FP32, .rows = 64, .cols = 4096,
                       .kernel = TUNED_KERNEL_SOFTMAX};
    tuned__config smc = c;
    smc.sel = TUNED__SEL_SCAN;
    EXPECT(!tuned__config_check(&smc, &sm, 90, 132, why, sizeof why) &&
               strstr(why, "terms=lanes") != NULL,
           "softmax took terms=lanes: %s", why);

    /* the space: both places for the renormalising key, one for the other */
    tuned__space sp;
    size_t with = 0, without = 0;
    int rc = tuned__space_init(&sp, &renorm, 90, 132, &e);
    EXPECT_RC(rc, 0, &e);
    if (rc == 0) {
        for (size_t i = 0; i < sp.count; i++)
            with += sp.valid[i].terms == TUNED__TERMS_LANES;
        tuned__config nbrs[128];
        size_t nn = tuned__space_neighbors(&sp, &c, nbrs, 128);
        bool back = false;
        for (size_t i = 0; i < nn; i++)
            back |= nbrs[i].terms == TUNED__TERMS_ROUNDS && nbrs[i].sel == c.sel &&
                    nbrs[i].warps == c.warps && nbrs[i].rows == c.rows && nbrs[i].vec == c.vec;
        EXPECT(back, "no step from terms=lanes to the rounds' terms");
        EXPECT(with > 0 && with < sp.count, "renorm key: %zu of %zu configs terms=lanes", with,
               sp.count);
        tuned__space_free(&sp);
    }
    rc = tuned__space_init(&sp, &plain, 90, 132, &e);
    EXPECT_RC(rc, 0, &e);
    if (rc == 0) {
        for (size_t i = 0; i < sp.count; i++)
            without += sp.valid[i].terms != TUNED__TERMS_ROUNDS;
        EXPECT(without == 0, "a key without renorm: %zu configs terms=lanes", without);
        tuned__space_free(&sp);
    }
}

/* The forward compiles in only its key's bias path, so a launch whose bias
 * is not where its key says is refused before the driver sees it (the
 * driver is never called here: none is loaded). */
static void test_launch_refuses_bias(void)
{
    const tuned__kind_spec *k = router();
    int bias = -1;
    for (unsigned i = 0; i < k->ntensors; i++)
        if (strcmp(k->tensor[i].name, "bias") == 0)
            bias = (int)i;
    EXPECT(bias >= 0 && k->tensor[bias].present_param != 0,
           "the router's bias names its key's parameter");
    if (bias < 0)
        return;
    static const struct {
        const char *params;
        CUdeviceptr given;
    } cases[] = {{"k=8", 0x1000}, {"k=8,bias=1", 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tuned__err e = {0};
        uint32_t w = 0;
        EXPECT_RC(tuned__params_parse(k, cases[c].params, &w, &e), 0, &e);
        tuned__launch l = {.grid = 1, .block = 32, .kind = k, .key_params = w};
        CUdeviceptr tensors[TUNED__KIND_MAX_TENSORS] = {0x2000, 0, 0x3000, 0x4000};
        tensors[bias] = cases[c].given;
        float opts[4] = {1.0f, 0, 0, 0};
        EXPECT(tuned__launch_run(NULL, &l, NULL, tensors, 1, 128, 128, opts, NULL) ==
                   CUDA_ERROR_INVALID_VALUE,
               "key %s, bias %s: the launch went on", cases[c].params,
               cases[c].given != 0 ? "given" : "none");
    }
}

int main(void)
{
    test_params();
    test_launch_refuses_bias();
    test_reference();
    test_net_configs();
    test_terms_configs();
    tuned__err e = {0};
    tuned__nvrtc *n = NULL;
    if (tuned__nvrtc_load(&n, &e) != 0) {
        fprintf(stderr, "SKIP compile: %s\n", e.msg);
        return failures > 0 ? 1 : TEST_SKIP;
    }
    test_compile(n);
    tuned__nvrtc_unload(n);
    return expect_done("router", NULL);
}
