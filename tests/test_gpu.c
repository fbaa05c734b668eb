/* test_gpu.c: on a GPU, every sampled variant of every kernel (softmax,
 * softmax_bwd, log_softmax, log_softmax_bwd) and dtype computes its kernel
 * correctly against float64 at awkward column counts (1, 7, ... 128256,
 * with -inf, NaN and +inf rows from the generator; the forward kernels at
 * a scale of 0.75), also from unaligned base pointers; rows split over the
 * grid and rows partly in shared memory too (softmax and log_softmax);
 * the router's grouped keys, compiled-in options (int32 ids, bf16
 * weights) and renormalised backwards; and the evaluator's gate catches
 * deliberately broken variants of the forward and backward templates, and
 * stray writes on either side of the output.
 * `test_gpu fault` (a process of its own: its context dies): a tune whose
 * variant kills the context records that variant in the history as
 * failed. `test_gpu stray`: the stray writes alone. Exits 77 (skipped) where no CUDA driver or GPU is found. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/cross_entropy.h"
#include "src/driver/check.h"
#include "src/tuner/evaluator.h"
#include "src/tuner/space.h"
#include "src/tuner/tune.h"

#define SKIP 77

#include "tests/expect.h"

typedef struct gpu_env {
    tuned__driver *d;
    tuned__nvrtc *n;
    tuned__gpu gpu;
} gpu_env;

static tuned__eval_opts quick_opts(void)
{
    tuned__eval_opts o;
    tuned__eval_opts_default(&o);
    o.budget_ms = 0.5;
    o.min_reps = 1;
    o.max_reps = 3;
    return o;
}

/* Runs configs on shape with opts; every one must be correct. */
static void expect_correct(gpu_env *g, const tuned__shape *s, const tuned__config *cfgs, size_t n,
                           const tuned__eval_opts *o)
{
    tuned__err e = {0};
    tuned__evaluator *ev = NULL;
    if (tuned__evaluator_open(&ev, g->d, g->n, &g->gpu, s, o, &e) != 0) {
        EXPECT(0, "evaluator %llux%llu %s: %s", (unsigned long long)s->rows,
               (unsigned long long)s->cols, tuned_dtype_name(s->dtype), e.msg);
        return;
    }
    tuned__eval_result *res = calloc(n, sizeof *res);
    if (tuned__evaluator_run(ev, cfgs, n, res, &e) != 0) {
        EXPECT(0, "run %llux%llu: %s", (unsigned long long)s->rows, (unsigned long long)s->cols,
               e.msg);
    } else {
        for (size_t i = 0; i < n; i++) {
            char name[TUNED__CONFIG_TEXT];
            tuned__config_format(&cfgs[i], name, sizeof name);
            EXPECT(res[i].status == TUNED__EVAL_OK, "%s %s %llux%llu %s offsets %zu/%zu: %s: %s",
                   tuned__kernel_name((uint8_t)tuned__shape_kernel(s)), name,
                   (unsigned long long)s->rows, (unsigned long long)s->cols,
                   tuned_dtype_name(s->dtype), o->x_offset, o->y_offset,
                   tuned__eval_status_name(res[i].status), res[i].detail);
        }
    }
    free(res);
    tuned__evaluator_close(ev);
}

static void planted_bugs_are_caught(gpu_env *g)
{
#ifndef TUNED_TEST_HOOKS
    /* Planted bugs are a test hook: this build cannot plant them. */
    (void)g;
    printf("planted bugs: skipped (built without -Dtest_hooks=true)\n");
    return;
#endif
    tuned__config c = {.warps = 4, .rows = 1, .cluster = 1, .minb = 1, .vec = 8};
    for (int bug = 1; bug <= 4; bug++) {
        /* bugs 1 and 2 in softmax_rows.cu, then again in softmax_bwd.cu */
        tuned__shape s = {TUNED_FP16, 64, 4097,
                          bug <= 2 ? TUNED_KERNEL_SOFTMAX : TUNED_KERNEL_SOFTMAX_BWD, 0};
        tuned__eval_opts o = quick_opts();
        o.codegen.plant_bug = (bug - 1) % 2 + 1;
        tuned__err e = {0};
        tuned__evaluator *ev = NULL;
        tuned__eval_result res;
        if (tuned__evaluator_open(&ev, g->d, g->n, &g->gpu, &s, &o, &e) != 0 ||
            tuned__evaluator_run(ev, &c, 1, &res, &e) != 0) {
            EXPECT(0, "planted bug %d: %s", bug, e.msg);
        } else {
            EXPECT(res.status == TUNED__EVAL_WRONG && res.median_us == 0.0,
                   "planted bug %d was not caught (status %s)", bug,
                   tuned__eval_status_name(res.status));
            printf("planted bug %d caught: %s\n", bug, res.detail);
        }
        tuned__evaluator_close(ev);
    }
}

/* A correct variant with one byte overwritten outside its output (a
 * stray store) is wrong: just before its first element, at the front
 * guard's first byte, just past its last element and at the back guard's
 * last byte; from rows 3 elements off a vector boundary too, where the
 * front guard holds the offset's bytes. */
static void stray_writes_are_caught(gpu_env *g)
{
#ifndef TUNED_TEST_HOOKS
    (void)g;
    printf("stray writes: skipped (built without -Dtest_hooks=true)\n");
    return;
#else
    tuned__config c = {.warps = 4, .rows = 1, .cluster = 1, .minb = 1, .vec = 8};
    tuned__shape s = {TUNED_FP16, 64, 4097, TUNED_KERNEL_SOFTMAX, 0};
    long long bytes = (long long)(s.rows * s.cols * 2);
    for (int offset = 0; offset <= 3; offset += 3) {
        long long front = TUNED__CHECK_GUARD_BYTES + 2LL * offset;
        struct {
            long long at;
            const char *says;
        } plants[] = {{-1, "before"},    {-front, "before"}, {bytes, "past"},
                      {bytes + TUNED__CHECK_GUARD_BYTES - 1, "past"}, {0, NULL}};
        for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++) {
            tuned__eval_opts o = quick_opts();
            o.y_offset = (size_t)offset;
            o.stray_write = plants[i].at;
            tuned__err e = {0};
            tuned__evaluator *ev = NULL;
            tuned__eval_result res;
            if (tuned__evaluator_open(&ev, g->d, g->n, &g->gpu, &s, &o, &e) != 0 ||
                tuned__evaluator_run(ev, &c, 1, &res, &e) != 0) {
                EXPECT(0, "stray write at %lld: %s", plants[i].at, e.msg);
            } else if (plants[i].says == NULL) {
                EXPECT(res.status == TUNED__EVAL_OK, "the unplanted control failed: %s %s",
                       tuned__eval_status_name(res.status), res.detail);
            } else {
                EXPECT(res.status == TUNED__EVAL_WRONG && strstr(res.detail, plants[i].says),
                       "a stray write at y%+lld (y offset %d) was not caught: %s %s",
                       plants[i].at, offset, tuned__eval_status_name(res.status), res.detail);
                printf("stray write at y%+lld caught: %s\n", plants[i].at, res.detail);
            }
            tuned__evaluator_close(ev);
        }
    }
#endif
}

/* g's GPU's compute capability as the space and the config rule take it
 * (10 * major + minor). */
static int arch_of(const gpu_env *g)
{
    return g->gpu.cc_major * 10 + g->gpu.cc_minor;
}

/* The space of s on g's GPU; false, the test failed and said why, where
 * it has none. */
static bool space_of(gpu_env *g, const tuned__shape *s, tuned__space *sp)
{
    tuned__err e = {0};
    if (tuned__space_init(sp, s, arch_of(g), g->gpu.sm_count, &e) != 0) {
        EXPECT(0, "space: %s", e.msg);
        return false;
    }
    return true;
}

/* A sample of the configs of each dtype's spaces of kernel over shapes
 * that take: eight drawn at random, the first three again from unaligned
 * base pointers. Returns the runs made. */
static size_t sample_is_correct(gpu_env *g, unsigned kernel, const uint64_t (*shapes)[2],
                                size_t nshapes, bool (*takes)(const tuned__config *),
                                const char *what)
{
    size_t runs = 0;
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
        for (size_t i = 0; i < nshapes; i++) {
            tuned__shape s = {(tuned_dtype)dt, shapes[i][0], shapes[i][1], (uint8_t)kernel, 0};
            tuned__space sp;
            if (!space_of(g, &s, &sp))
                continue;
            tuned__config cfgs[8];
            size_t n = 0, taken = 0;
            for (size_t k = 0; k < sp.count; k++)
                taken += takes(&sp.valid[k]);
            tuned__rng rng = {7 + (uint64_t)dt * 100 + i};
            for (size_t tries = 0; n < 8 && taken > 0 && tries < 100000; tries++) {
                tuned__config c;
                tuned__space_random(&sp, &rng, &c);
                if (takes(&c))
                    cfgs[n++] = c;
            }
            EXPECT(n > 0, "no %s for %llux%llu %s", what, (unsigned long long)s.rows,
                   (unsigned long long)s.cols, tuned_dtype_name(s.dtype));
            tuned__eval_opts o = quick_opts();
            expect_correct(g, &s, cfgs, n, &o);
            o.x_offset = 3;
            o.y_offset = 1;
            expect_correct(g, &s, cfgs, n < 3 ? n : 3, &o);
            runs += n + (n < 3 ? n : 3);
            tuned__space_free(&sp);
        }
    return runs;
}

static bool grid_split(const tuned__config *c)
{
    return c->grid > 1;
}

static bool stashed(const tuned__config *c)
{
    return c->stash > 0;
}

static bool replicated(const tuned__config *c)
{
    return c->replicas > 1;
}

/* Rows held by replicas (each cluster loads and reduces the whole row and
 * stores its passes): one long row, two ragged ones. */
static size_t replicas_are_correct(gpu_env *g, unsigned kernel)
{
    static const uint64_t shapes[][2] = {{1, 262144}, {2, 100003}, {1, 128256}};
    return sample_is_correct(g, kernel, shapes, sizeof shapes / sizeof shapes[0], replicated,
                             "replicas");
}

/* Rows split over the grid (cooperative launches through the workspace):
 * few long rows, a ragged tail, many rows at two blocks a SM. */
static size_t grid_splits_are_correct(gpu_env *g, unsigned kernel)
{
    static const uint64_t shapes[][2] = {{1, 262144}, {2, 100003}, {24, 128256}, {100, 1000}};
    return sample_is_correct(g, kernel, shapes, sizeof shapes / sizeof shapes[0], grid_split,
                             "grid split");
}

/* Passes kept in shared memory (cp.async, exps again at the store): rows
 * too long for the registers of small blocks, one of them ragged. */
static size_t stashes_are_correct(gpu_env *g, unsigned kernel)
{
    static const uint64_t shapes[][2] = {{3, 262144}, {5, 200003}};
    return sample_is_correct(g, kernel, shapes, sizeof shapes / sizeof shapes[0], stashed,
                             "stash");
}

/* The cross-entropy kinds built with their compiled-in softcap and argmax
 * (the check runs them at its cap and checks the argmax against the float64
 * reference's): rows of a block and rows on a cluster, every dtype. */
static size_t ce_options_are_correct(gpu_env *g)
{
    static const uint64_t shapes[][2] = {{64, 5000}, {4, 128256}};
    size_t runs = 0;
    for (unsigned kernel = TUNED_KERNEL_CROSS_ENTROPY; kernel <= TUNED_KERNEL_CROSS_ENTROPY_BWD;
         kernel++)
        for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                tuned__shape s = {(tuned_dtype)dt, shapes[i][0], shapes[i][1], (uint8_t)kernel, 0};
                tuned__space sp;
                if (!space_of(g, &s, &sp))
                    continue;
                tuned__config cfgs[4];
                tuned__rng rng = {91 + (uint64_t)dt * 10 + i + 100 * kernel};
                for (size_t k = 0; k < 4; k++)
                    tuned__space_random(&sp, &rng, &cfgs[k]);
                tuned__eval_opts o = quick_opts();
                o.codegen.flags = TUNED__CE_FLAG_SOFTCAP | TUNED__CE_FLAG_ARGMAX;
                expect_correct(g, &s, cfgs, 4, &o);
                runs += 4;
                tuned__space_free(&sp);
            }
    return runs;
}

/* A router key's shape (67 rows of dt, params parsed) and n configs drawn
 * from its space on this GPU with seed; false where it has none. */
static bool router_key_drawn(gpu_env *g, uint8_t kernel, tuned_dtype dt, uint64_t cols,
                             const char *params, uint64_t seed, tuned__shape *s,
                             tuned__config *cfgs, size_t n)
{
    *s = (tuned__shape){dt, 67, cols, kernel, 0};
    tuned__err e = {0};
    EXPECT_RC(tuned__params_parse(tuned__kind(kernel), params, &s->params, &e), 0, &e);
    tuned__space sp;
    if (!space_of(g, s, &sp))
        return false;
    tuned__rng rng = {seed};
    for (size_t k = 0; k < n; k++)
        tuned__space_random(&sp, &rng, &cfgs[k]);
    tuned__space_free(&sp);
    return true;
}

/* A router key: experts and key parameters' text. */
typedef struct router_key {
    uint64_t cols;
    const char *params;
} router_key;

/* n configs drawn from each key's space (seed + the key's index), in one
 * dtype a key (fp16, bf16, fp32 in turn), checked; with unaligned the
 * first two again from unaligned base pointers. Returns the runs. */
static size_t router_keys_are_correct(gpu_env *g, uint8_t kernel, const router_key *keys,
                                      size_t nkeys, uint64_t seed, size_t n, bool unaligned)
{
    size_t runs = 0;
    for (size_t i = 0; i < nkeys; i++) {
        tuned__shape s;
        tuned__config cfgs[8];
        if (n > 8 || !router_key_drawn(g, kernel, (tuned_dtype)(TUNED_FP16 + (int)(i % 3)),
                                       keys[i].cols, keys[i].params, seed + i, &s, cfgs, n))
            continue;
        tuned__eval_opts o = quick_opts();
        expect_correct(g, &s, cfgs, n, &o);
        runs += n;
        if (unaligned) {
            o.x_offset = 3;
            o.y_offset = 1;
            expect_correct(g, &s, cfgs, 2, &o);
            runs += 2;
        }
    }
    return runs;
}

/* The drawn configs (n) with one field moved by move, those the shape
 * takes on this GPU, at most max, into out; returns how many. */
static size_t router_moved(gpu_env *g, const tuned__shape *s, const tuned__config *drawn,
                           size_t n, void (*move)(tuned__config *), tuned__config *out,
                           size_t max)
{
    size_t taken = 0;
    for (size_t k = 0; k < n && taken < max; k++) {
        tuned__config c = drawn[k];
        move(&c);
        if (tuned__config_check(&c, s, arch_of(g), g->gpu.sm_count, NULL, 0))
            out[taken++] = c;
    }
    return taken;
}

/* The n configs checked, then the first two again from unaligned base
 * pointers. Returns the runs. */
static size_t expect_correct_then_unaligned(gpu_env *g, const tuned__shape *s,
                                            const tuned__config *cfgs, size_t n)
{
    tuned__eval_opts o = quick_opts();
    expect_correct(g, s, cfgs, n, &o);
    o.x_offset = 3;
    o.y_offset = 1;
    expect_correct(g, s, cfgs, n < 2 ? n : 2, &o);
    return n + (n < 2 ? n : 2);
}

static void to_terms_lanes(tuned__config *c)
{
    c->terms = TUNED__TERMS_LANES;
}

static void to_merge(tuned__config *c)
{
    c->sel = TUNED__SEL_MERGE;
}

/* The router's grouped keys (the example key has no groups), 6 drawn
 * configs of each, the first two again from unaligned base pointers;
 * groups a power of two up to the row's threads take the halving
 * combine, the others the butterfly a group. Returns the runs. */
static size_t router_groups_are_correct(gpu_env *g)
{
    static const router_key keys[] = {
        {256, "k=8,score=sigmoid,groups=8,topk_group=4,renorm=1,bias=1"}, /* DeepSeek-V3 */
        {96, "k=8,groups=4,topk_group=2"},
        {64, "k=4,score=sqrt_softplus,groups=8,topk_group=3,renorm=1"},
        {160, "k=6,score=sigmoid,groups=8,topk_group=2,bias=1"}, /* groups of 20 */
        {2048, "k=16,score=sigmoid,groups=32,topk_group=2,bias=1"},
        {384, "k=8,groups=2,topk_group=1,renorm=1"},
    };
    return router_keys_are_correct(g, TUNED_KERNEL_ROUTER_TOPK, keys,
                                   sizeof keys / sizeof keys[0], 23, 6, true);
}

/* terms=lanes (a renormalising key's terms formed in their output lanes):
 * configs drawn from each key's space with the terms moved there, every
 * one that takes them (several threads a row), in one dtype a key; the
 * first key's biased rows take their largest logit after the staged
 * rounds, the last's k of 24 the rounds' sum beside it. Returns the runs. */
static size_t router_terms_are_correct(gpu_env *g)
{
    static const router_key keys[] = {
        {384, "k=8,score=sigmoid,renorm=1,bias=1"}, /* Kimi K2 */
        {256, "k=8,score=sigmoid,groups=8,topk_group=4,renorm=1,bias=1"}, /* DeepSeek-V3 */
        {60, "k=4,renorm=1"},
        {160, "k=6,score=sqrt_softplus,renorm=1"},
        {128, "k=24,renorm=1,bias=1"},
    };
    size_t runs = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        tuned__shape s;
        tuned__config drawn[8], cfgs[8];
        if (!router_key_drawn(g, TUNED_KERNEL_ROUTER_TOPK, (tuned_dtype)(TUNED_FP16 + (int)(i % 3)),
                              keys[i].cols, keys[i].params, 97 + i, &s, drawn, 8))
            continue;
        size_t n = router_moved(g, &s, drawn, 8, to_terms_lanes, cfgs, 8);
        EXPECT(n > 0, "%llu experts %s: no drawn config takes terms=lanes",
               (unsigned long long)keys[i].cols, keys[i].params);
        tuned__eval_opts o = quick_opts();
        expect_correct(g, &s, cfgs, n, &o);
        runs += n;
    }
    return runs;
}

/* The keys the selections without rounds (merge, rank) are checked on. */
static const router_key selection_keys[] = {
    {8, "k=2,renorm=1"}, /* Mixtral */
    {60, "k=4"},
    {128, "k=8"}, /* Qwen3-MoE */
    {160, "k=6,score=sqrt_softplus,renorm=1"},
    {256, "k=8,score=sigmoid,groups=8,topk_group=4,renorm=1,bias=1"}, /* DeepSeek-V3 */
    {384, "k=8,score=sigmoid,renorm=1,bias=1"}, /* Kimi K2 */
    {100, "k=1,score=sigmoid"},
    {2048, "k=3,renorm=1"},
};

/* sel=merge (each thread's best k merged between the row's lanes, key and
 * column in one word): configs drawn from each key's space moved to it,
 * the first 4 that take it, in every dtype (fp32's dropped key bits can
 * misorder a row, which must rerun exactly: check_router.c plants a row
 * of one-ulp steps; fp16's and bf16's cannot), the first two again from
 * unaligned base pointers. Returns the runs. */
static size_t router_merges_are_correct(gpu_env *g)
{
    const router_key *keys = selection_keys;
    size_t runs = 0;
    for (size_t i = 0; i < sizeof selection_keys / sizeof selection_keys[0]; i++)
        for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
            tuned__shape s;
            tuned__config drawn[16], cfgs[4];
            if (!router_key_drawn(g, TUNED_KERNEL_ROUTER_TOPK, (tuned_dtype)dt, keys[i].cols,
                                  keys[i].params, 131 + i, &s, drawn, 16))
                continue;
            size_t n = router_moved(g, &s, drawn, 16, to_merge, cfgs, 4);
            EXPECT(n > 0, "%llu experts %s %s: no drawn config takes sel=merge",
                   (unsigned long long)keys[i].cols, keys[i].params,
                   tuned_dtype_name((tuned_dtype)dt));
            runs += expect_correct_then_unaligned(g, &s, cfgs, n);
        }
    return runs;
}

/* sel=rank (a row over 32 to 1024 threads, its candidates ranked in
 * shared memory) for one key in every dtype: one block-of-rows config for
 * each threads-a-row 32 to 1024 the key takes, one and two rows a block,
 * load hints in turn, at most 6, the first two again from unaligned base
 * pointers (check_router.c's planted rows: ties, NaN, +inf, -0). Returns
 * the runs. */
static size_t router_ranks_of(gpu_env *g, const router_key *key, uint64_t seed)
{
    size_t runs = 0;
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
        tuned__shape s;
        tuned__config drawn[1], cfgs[6];
        if (!router_key_drawn(g, TUNED_KERNEL_ROUTER_TOPK, (tuned_dtype)dt, key->cols,
                              key->params, seed, &s, drawn, 1))
            continue;
        size_t n = 0;
        for (unsigned tpr = 32; tpr <= 1024 && n < 6; tpr *= 2)
            for (unsigned rows = 1; rows <= 2 && n < 6; rows++) {
                tuned__config c = {.family = TUNED__FAMILY_ROWS,
                                   .warps = (uint8_t)(tpr * rows / 32), .rows = (uint16_t)rows,
                                   .cluster = 1, .minb = 1, .vec = 1,
                                   .ld = (uint8_t)(n % 3), .sel = TUNED__SEL_RANK};
                if (c.warps <= 32 &&
                    tuned__config_check(&c, &s, arch_of(g), g->gpu.sm_count, NULL, 0))
                    cfgs[n++] = c;
            }
        EXPECT(n > 0, "%llu experts %s %s: no config takes sel=rank",
               (unsigned long long)key->cols, key->params, tuned_dtype_name((tuned_dtype)dt));
        runs += expect_correct_then_unaligned(g, &s, cfgs, n);
    }
    return runs;
}

/* sel=rank on the selections' keys and on keys with more groups, larger k
 * and k past 8. Returns the runs. */
static size_t router_ranks_are_correct(gpu_env *g)
{
    static const router_key more[] = {
        {160, "k=6,score=sigmoid,groups=8,topk_group=2,bias=1"}, /* groups of 20 */
        {96, "k=8,groups=4,topk_group=2"},
        {128, "k=24,renorm=1,bias=1"},
        {2048, "k=16,score=sigmoid,groups=32,topk_group=2,bias=1"},
        {200, "k=64"},
    };
    size_t runs = 0;
    for (size_t i = 0; i < sizeof selection_keys / sizeof selection_keys[0]; i++)
        runs += router_ranks_of(g, &selection_keys[i], 211 + i);
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        runs += router_ranks_of(g, &more[i], 241 + i);
    return runs;
}

/* The router's compiled-in options: int32 ids and bf16 weights (the
 * forward), int32 ids (the backward), a few drawn configs of three keys,
 * one dtype a key. Returns the runs. */
static size_t router_options_are_correct(gpu_env *g)
{
    static const struct {
        uint8_t kernel;
        uint64_t cols;
        const char *params;
        unsigned flags;
    } keys[] = {
        {TUNED_KERNEL_ROUTER_TOPK, 128, "k=8",
         TUNED__ROUTER_FLAG_IDS32 | TUNED__ROUTER_FLAG_WEIGHTS_BF16},
        {TUNED_KERNEL_ROUTER_TOPK, 256, "k=8,score=sigmoid,groups=8,topk_group=4,renorm=1,bias=1",
         TUNED__ROUTER_FLAG_WEIGHTS_BF16},
        {TUNED_KERNEL_ROUTER_TOPK, 60, "k=4,renorm=1", TUNED__ROUTER_FLAG_IDS32},
        {TUNED_KERNEL_ROUTER_TOPK_BWD, 160, "k=6,score=sigmoid,renorm=1",
         TUNED__ROUTER_FLAG_IDS32},
    };
    size_t runs = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        tuned__shape s;
        tuned__config cfgs[3];
        if (!router_key_drawn(g, keys[i].kernel, (tuned_dtype)(TUNED_FP16 + (int)(i % 3)),
                              keys[i].cols, keys[i].params, 71 + i, &s, cfgs, 3))
            continue;
        tuned__eval_opts o = quick_opts();
        o.codegen.flags = keys[i].flags;
        expect_correct(g, &s, cfgs, 3, &o);
        runs += 3;
    }
    return runs;
}

/* The backward's renormalised keys (Mixtral's and Qwen3-MoE's softmax,
 * sigmoid, sqrt-softplus) and one without renorm, 3 drawn configs a key:
 * with 67 rows the generator's NaN, +inf and -inf rows are in, with ids
 * drawn at random (a row's softmax NaN while its given ids miss the
 * non-finite logit). Returns the runs. */
static size_t router_backwards_are_correct(gpu_env *g)
{
    static const router_key keys[] = {
        {8, "k=2,renorm=1"}, /* Mixtral */
        {128, "k=8,renorm=1"}, /* Qwen3-MoE */
        {128, "k=8,renorm=1"},
        {64, "k=4,score=sqrt_softplus,renorm=1"},
        {384, "k=8,score=sigmoid,renorm=1"},
        {60, "k=4"},
    };
    return router_keys_are_correct(g, TUNED_KERNEL_ROUTER_TOPK_BWD, keys,
                                   sizeof keys / sizeof keys[0], 131, 3, false);
}

/* ---- `test_gpu fault`: a variant that kills the context (its own
 * process: the context stays dead) ---- */

typedef struct fault_plan {
    gpu_env *g;
    bool planted;
    char config[TUNED__CONFIG_TEXT];
} fault_plan;

/* Right before the tune's first variant launches, a one-thread kernel
 * stores to address 8, as a variant writing far out of bounds would: the
 * context dies of an illegal address as that variant starts. */
static void fault_first_variant(void *ctx, const tuned__config *c)
{
    static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                              ".visible .entry tuned_test_fault()\n{\n"
                              "  .reg .b64 %rd<2>;\n  .reg .b32 %r<2>;\n"
                              "  mov.u64 %rd1, 8;\n  mov.u32 %r1, 1;\n"
                              "  st.global.u32 [%rd1], %r1;\n  ret;\n}\n";
    fault_plan *f = ctx;
    if (f->planted)
        return;
    f->planted = true;
    tuned__config_format(c, f->config, sizeof f->config);
    const tuned__driver *d = f->g->d;
    CUmodule mod;
    CUfunction fn;
    tuned__err e = {0};
    int rc = tuned__cuda_check(d, d->cuModuleLoadData(&mod, ptx), &e, "loading the fault");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuModuleGetFunction(&fn, mod, "tuned_test_fault"), &e,
                               "finding the fault");
    if (rc == 0)
        rc = tuned__cuda_check(d, d->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                               &e, "launching the fault");
    /* Dead before the variant's first call, whatever its stream sees. */
    EXPECT(rc == 0 && d->cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS,
           "planting the fault: %s", rc != 0 ? e.msg : "the kernel did not fault");
}

/* Outside the daemon (`tuned tune`, the library's child tunes), nothing
 * else names the variant a dead context died of: the tune's history must,
 * or every later tune of the shape runs it again and dies the same way. */
static int context_killer_is_recorded(gpu_env *g)
{
    char dir[] = "/tmp/test_gpu_fault.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    tuned__err e = {0};
    tuned__store *st = NULL;
    if (tuned__store_open(&st, dir, 0, &e) != 0) {
        fprintf(stderr, "FAIL: store: %s\n", e.msg);
        return 1;
    }
    fault_plan plan = {.g = g};
    tuned__tune_request r;
    tuned__tune_request_default(&r);
    r.shape = (tuned__shape){TUNED_FP16, 64, 1024, TUNED_KERNEL_SOFTMAX, 0};
    r.store = st;
    r.search.budget = 16;
    r.eval = quick_opts();
    r.eval.on_variant = fault_first_variant;
    r.eval.on_variant_ctx = &plan;
    tuned__tune_outcome out;
    int rc = tuned__tune(g->d, g->n, &r, NULL, NULL, &out, &e);
    EXPECT(plan.planted && rc != 0, "the tune went on after its context died: rc %d", rc);
    tuned__store_key key;
    tuned__tune_key(&out.gpu, &r.shape, &key);
    static tuned__store_eval page[256];
    size_t n = 0;
    bool recorded = false;
    EXPECT(tuned__store_list_evals(st, &key, NULL, page, 256, &n, &e) == 0, "history: %s", e.msg);
    for (size_t i = 0; i < n; i++)
        if (strcmp(page[i].config, plan.config) == 0) {
            recorded = page[i].status == TUNED__HIST_LAUNCH_ERROR;
            printf("history: %s: %s: %s\n", page[i].config,
                   tuned__hist_status_name(page[i].status), page[i].detail);
        }
    EXPECT(recorded, "the variant that killed the context (%s) is not in the history as failed "
                     "(%zu entries)",
           plan.config, n);
    tuned__store_close(st);
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("context killer: %s; %d failures\n", plan.config, failures);
    return failures ? 1 : 0;
}

/* Whether kind name is asked for: list (GPU_CORRECTNESS_KINDS, comma-
 * separated names) is NULL (every kind) or names it. */
static bool kind_asked(const char *list, const char *name)
{
    if (list == NULL)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        if (end == NULL)
            break;
        p = end + 1;
    }
    return false;
}

int main(int argc, char **argv)
{
    gpu_env g = {0};
    tuned__err e = {0};
    int rc = tuned__driver_load(&g.d, &e);
    if (rc == TUNED_ENODRIVER || rc == TUNED_ENODEV) {
        printf("SKIP: %s\n", e.msg);
        return SKIP;
    }
    if (rc != 0 || tuned__nvrtc_load(&g.n, &e) != 0 || tuned__gpu_query(g.d, g.n, 0, &g.gpu, &e)) {
        fprintf(stderr, "FAIL: %s\n", e.msg);
        return 1;
    }
    printf("GPU: %s\n", g.gpu.identity);
    if (argc > 1 && strcmp(argv[1], "fault") == 0)
        return context_killer_is_recorded(&g);
    if (argc > 1 && strcmp(argv[1], "stray") == 0) {
        stray_writes_are_caught(&g);
        printf("stray writes: %d failures\n", failures);
        return failures ? 1 : 0;
    }
    static const uint64_t cols_list[] = {1,    7,     32,    100,    1000,
                                         1024, 4097, 32000, 50257, 128256, 262144};
    size_t variants = 0;
    /* GPU_CORRECTNESS_KINDS=NAME[,NAME]: only those kinds (a short run
     * after a change to one kind). */
    const char *only_kinds = getenv("GPU_CORRECTNESS_KINDS");
    for (unsigned kernel = TUNED_KERNEL_SOFTMAX; kernel <= TUNED__KIND_COUNT; kernel++)
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
        if (!kind_asked(only_kinds, tuned__kernel_name((uint8_t)kernel)))
            continue;
        /* a composite runs its inner kind's kernel inside GEMMs: its check
         * is test_lce_check's and its evaluation's own */
        if (tuned__kind(kernel)->evaluate != TUNED__EVALUATE_KERNEL)
            continue;
        /* softmax sampled most; the others share its stages */
        const int per_shape = kernel == TUNED_KERNEL_SOFTMAX ? 6 : 3;
        bool example_done = false;
        for (size_t i = 0; i < sizeof cols_list / sizeof cols_list[0]; i++) {
            if (kernel != TUNED_KERNEL_SOFTMAX && i % 2 == 1 && cols_list[i] != 128256)
                continue;
            tuned__shape s = {(tuned_dtype)dt, cols_list[i] > 200000 ? 2 : cols_list[i] > 30000 ? 24 : 67,
                              cols_list[i], (uint8_t)kernel, 0};
            /* a kind with key parameters at their defaults, on its example
             * columns where these are not its (a router's 2 to 2048) */
            tuned__kind_example(tuned__kind(kernel), &s.cols, &s.params);
            /* an optional tensor the key names (a router's bias) in every
             * other dtype: its kernels compile in the key's path alone */
            for (unsigned t = 0; t < tuned__kind(kernel)->ntensors; t++)
                if (tuned__kind(kernel)->tensor[t].present_param != 0)
                    s.params = tuned__params_set(tuned__kind(kernel), s.params,
                                                 tuned__kind(kernel)->tensor[t].present_param - 1u,
                                                 dt % 2 == 0);
            if (s.cols != cols_list[i]) {
                if (example_done)
                    continue; /* once, not for every column count it stands for */
                example_done = true;
            }
            tuned__space sp;
            rc = tuned__space_init(&sp, &s, arch_of(&g), g.gpu.sm_count, &e);
            if (rc == TUNED_ENOSPACE) {
                printf("no variant of %s for %s x %llu: %s\n", tuned__kernel_name((uint8_t)kernel),
                       tuned_dtype_name(s.dtype), (unsigned long long)s.cols, e.msg);
                continue;
            }
            EXPECT(rc == 0, "space: %s", e.msg);
            if (rc != 0)
                continue;
            tuned__config cfgs[24];
            size_t n = tuned__space_seeds(&sp, cfgs, 12);
            tuned__rng rng = {42 + (uint64_t)dt * 1000 + i};
            for (size_t k = 0; k < (size_t)per_shape; k++)
                tuned__space_random(&sp, &rng, &cfgs[n++]);
            /* The unaligned run below takes the first three: one of them
             * streamed through shared memory where that family applies. */
            for (size_t k = 3; k < n; k++)
                if (cfgs[k].family == TUNED__FAMILY_TMA) {
                    tuned__config t = cfgs[0];
                    cfgs[0] = cfgs[k];
                    cfgs[k] = t;
                    break;
                }
            tuned__eval_opts o = quick_opts();
            expect_correct(&g, &s, cfgs, n, &o);
            /* Unaligned base pointers, x and y misaligned differently. */
            o.x_offset = 1;
            o.y_offset = 3;
            expect_correct(&g, &s, cfgs, 3, &o);
            variants += n + 3;
            tuned__space_free(&sp);
        }
    }
    /* The families' own runs, each where its kind is asked for (all of
     * them without GPU_CORRECTNESS_KINDS); the planted bugs are the softmax
     * and softmax_bwd templates', the stray writes softmax's. */
    static const unsigned row_kinds[] = {TUNED_KERNEL_SOFTMAX, TUNED_KERNEL_LOG_SOFTMAX};
    for (size_t i = 0; i < sizeof row_kinds / sizeof row_kinds[0]; i++) {
        if (!kind_asked(only_kinds, tuned__kernel_name((uint8_t)row_kinds[i])))
            continue;
        variants += grid_splits_are_correct(&g, row_kinds[i]);
        variants += stashes_are_correct(&g, row_kinds[i]);
        variants += replicas_are_correct(&g, row_kinds[i]);
    }
    if (kind_asked(only_kinds, "cross_entropy") || kind_asked(only_kinds, "cross_entropy_loss") ||
        kind_asked(only_kinds, "cross_entropy_bwd"))
        variants += ce_options_are_correct(&g);
    if (kind_asked(only_kinds, "router_topk"))
        variants += router_groups_are_correct(&g);
    if (kind_asked(only_kinds, "router_topk"))
        variants += router_options_are_correct(&g);
    if (kind_asked(only_kinds, "router_topk"))
        variants += router_terms_are_correct(&g);
    if (kind_asked(only_kinds, "router_topk"))
        variants += router_merges_are_correct(&g);
    if (kind_asked(only_kinds, "router_topk"))
        variants += router_ranks_are_correct(&g);
    if (kind_asked(only_kinds, "router_topk_bwd"))
        variants += router_backwards_are_correct(&g);
    if (kind_asked(only_kinds, "softmax") || kind_asked(only_kinds, "softmax_bwd")) {
        planted_bugs_are_caught(&g);
        stray_writes_are_caught(&g);
    }
    tuned__nvrtc_unload(g.n);
    tuned__driver_unload(g.d);
    printf("%zu variant runs checked; %d failures\n", variants, failures);
    return failures ? 1 : 0;
}
