/* test_tune.c: the whole tune (tuned__tune_on) over a synthetic backend and
 * a real store, no GPU: history written after every generation and read
 * back to resume (nothing measured twice), --retune measuring anew, the
 * finalists' tie going to the simpler config, a noisy finalist, variants
 * that share one median told apart by their interquartile means, warm
 * start from another shape's record (and from fp16's for bf16), each
 * kernel (softmax_bwd, log_softmax, log_softmax_bwd) tuned in its own
 * space and filed under its own id, finalists that fail their rounds'
 * checks (never the winner; failures in the history), and a fatal
 * backend error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/hash.h"
#include "src/tuner/space.h"
#include "src/tuner/tune.h"

#include "tests/expect.h"

typedef struct synthetic {
    size_t calls;      /* configs evaluated, finalists' rounds included */
    size_t fail_after; /* fatal error after this many (0: never) */
    bool noisy;        /* st=cs 0.3 us faster; ld=nc +4 us on every other call */
    /* Every rows variant's median is one timer step; the bowl shows only
     * in the interquartile mean (and the p80) at a thousandth of its size.
     * best: the evaluated config with the lowest mean (the simpler among
     * equals). */
    bool plateau;
    bool seen;
    tuned__config best;
    double best_iqm;
    const tuned__space *space; /* when set: configs evaluated outside it are counted */
    size_t outside;
    /* A race the search's one check misses: a config evaluated again (as
     * only the finalists' rounds do) computes a wrong result. */
    bool wrong_again;
    bool record; /* every config evaluated kept in order in evaluated[] */
    tuned__config evaluated[1024];
    size_t nevaluated;
} synthetic;

/* Whether s evaluated c before; remembers it. */
static bool evaluated_before(synthetic *s, const tuned__config *c)
{
    for (size_t i = 0; i < s->nevaluated; i++)
        if (tuned__config_equal(&s->evaluated[i], c))
            return true;
    if (s->nevaluated < sizeof s->evaluated / sizeof s->evaluated[0])
        s->evaluated[s->nevaluated++] = *c;
    return false;
}

/* A bowl with its minimum at w8 r2 c1 m1 v4 reg=f32 red=split (rows
 * family); load and store hints do not matter, so the finalists tie on
 * them. */
static double synthetic_us(const tuned__config *c)
{
    if (c->family == TUNED__FAMILY_TMA)
        return 200.0 + c->stages;
    if (c->family == TUNED__FAMILY_CHUNK) /* a composite's chunk: best at 1024 rows */
        return 300.0 + fabs(log2((double)c->chunk) - 10.0);
    double dw = log2(c->warps) - 3, dr = log2(c->rows) - 1, dv = log2(c->vec) - 2;
    return 100.0 + 7 * dw * dw + 5 * dr * dr + 9 * dv * dv + 3 * log2(c->cluster) +
           2 * log2(c->minb) + (c->reg != TUNED__REG_F32 ? 1 : 0) +
           (c->red == TUNED__RED_FUSED ? 0.5 : 0);
}

static int run(void *ctx, const tuned__config *cfgs, size_t n, tuned__eval_result *out,
               tuned__err *e)
{
    synthetic *s = ctx;
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        if (s->fail_after != 0 && s->calls >= s->fail_after)
            return tuned__errf(e, TUNED_ECUDA, "cuda: planted fatal error");
        s->calls++;
        if (s->space != NULL && !tuned__space_valid(s->space, &cfgs[i], NULL, 0))
            s->outside++;
        if (s->record && s->nevaluated < sizeof s->evaluated / sizeof s->evaluated[0])
            s->evaluated[s->nevaluated++] = cfgs[i];
        if (s->wrong_again && evaluated_before(s, &cfgs[i])) {
            out[i].status = TUNED__EVAL_WRONG;
            snprintf(out[i].detail, sizeof out[i].detail, "3 elements wrong (planted race)");
            continue;
        }
        out[i].status = TUNED__EVAL_OK;
        double us = synthetic_us(&cfgs[i]);
        if (s->noisy && cfgs[i].family == TUNED__FAMILY_ROWS)
            us += (cfgs[i].st == TUNED__ST_CS ? -0.3 : 0.0) +
                  (cfgs[i].ld == TUNED__LD_NC && s->calls % 2 ? 4.0 : 0.0);
        out[i].median_us = out[i].p20_us = out[i].p80_us = out[i].iqm_us = us;
        if (s->plateau && cfgs[i].family == TUNED__FAMILY_ROWS) {
            out[i].iqm_us = 100.0 + 0.001 * (us - 100.0);
            out[i].median_us = out[i].p20_us = 100.0;
            out[i].p80_us = out[i].iqm_us + 0.05;
        }
        if (s->plateau && (!s->seen || out[i].iqm_us < s->best_iqm ||
                           (out[i].iqm_us == s->best_iqm &&
                            tuned__config_simpler(&cfgs[i], &s->best) < 0))) {
            s->seen = true;
            s->best = cfgs[i];
            s->best_iqm = out[i].iqm_us;
        }
    }
    return 0;
}

/* Tunes base's shape with cols columns over backend s (a fresh key). */
static void tune_synthetic(synthetic *s, const tuned__gpu *g, const tuned__tune_request *base,
                           uint64_t cols, tuned__tune_outcome *out, const char *what)
{
    tuned__tune_backend b = {.run = run, .ctx = s, .copy_us = 90.0};
    tuned__tune_request r = *base;
    r.shape.cols = cols;
    tuned__err e = {0};
    EXPECT(tuned__tune_on(&b, g, &r, NULL, NULL, out, &e) == 0, "%s: %s", what, e.msg);
}

static void fake_gpu(tuned__gpu *g)
{
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "Synthetic GPU");
    g->cc_major = 9;
    g->sm_count = 132;
    g->total_mem = 80ull << 30;
    snprintf(g->identity, sizeof g->identity, "Synthetic GPU|sm_90|132sm|81920MiB|test");
    g->fingerprint = tuned__fnv1a64(g->identity, strlen(g->identity), TUNED__FNV_SEED);
}

static size_t history_count(tuned__store *st, const tuned__gpu *g, const tuned__shape *s)
{
    tuned__store_key key;
    tuned__tune_key(g, s, &key);
    tuned__store_eval page[512];
    size_t n = 0, total = 0;
    char after[128] = "";
    do {
        if (tuned__store_list_evals(st, &key, after, page, 512, &n, NULL) != 0)
            return 0;
        total += n;
        if (n > 0)
            snprintf(after, sizeof after, "%s", page[n - 1].config);
    } while (n == 512);
    return total;
}

/* The first 4096 entries of the history of s on g (a static page; NULL
 * when it cannot be read), their count into *n. */
static const tuned__store_eval *history_page(tuned__store *st, const tuned__gpu *g,
                                             const tuned__shape *s, size_t *n)
{
    tuned__store_key key;
    tuned__tune_key(g, s, &key);
    static tuned__store_eval page[4096];
    *n = 0;
    return tuned__store_list_evals(st, &key, NULL, page, 4096, n, NULL) == 0 ? page : NULL;
}

/* Whether the history of s on g holds config. */
static bool history_has(tuned__store *st, const tuned__gpu *g, const tuned__shape *s,
                        const char *config)
{
    size_t n;
    const tuned__store_eval *page = history_page(st, g, s, &n);
    for (size_t i = 0; page != NULL && i < n; i++)
        if (strcmp(page[i].config, config) == 0)
            return true;
    return false;
}

/* The simplest config of those the history holds at time best. */
static bool simplest_fastest(tuned__store *st, const tuned__gpu *g, const tuned__shape *s,
                             double best, tuned__config *out)
{
    size_t n;
    const tuned__store_eval *page = history_page(st, g, s, &n);
    if (page == NULL)
        return false;
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        tuned__config c;
        if (page[i].median_us != best || tuned__config_parse(page[i].config, &c, NULL) != 0)
            continue;
        if (!found || tuned__config_simpler(&c, out) < 0)
            *out = c;
        found = true;
    }
    return found;
}

int main(void)
{
    char dir[] = "/tmp/test_tune.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/store", dir);
    tuned__err e = {0};
    tuned__store *st = NULL;
    if (tuned__store_open(&st, path, 0, &e) != 0) {
        fprintf(stderr, "FAIL: %s\n", e.msg);
        return 1;
    }
    tuned__gpu g;
    fake_gpu(&g);
    synthetic syn = {0};
    tuned__tune_backend b = {.run = run, .ctx = &syn, .copy_us = 90.0};
    tuned__tune_request r;
    tuned__tune_request_default(&r);
    r.shape = (tuned__shape){TUNED_FP16, 4096, 4096, TUNED_KERNEL_SOFTMAX, 0};
    r.store = st;
    /* Enough for the cold search to converge on the synthetic bowl's flat
     * bottom, so that a second run has nothing simpler left to find. */
    r.search.budget = 400;

    /* Cold: found the bowl's bottom, every evaluation in the history. */
    tuned__tune_outcome cold;
    EXPECT(tuned__tune_on(&b, &g, &r, NULL, NULL, &cold, &e) == 0, "cold: %s", e.msg);
    EXPECT(cold.search.found && fabs(cold.search.best_us - 100.0) < 1e-9,
           "cold best %.2f", cold.search.best_us);
    EXPECT(cold.search.resumed == 0 && cold.search.evaluations > 0, "cold counts");
    size_t hist = history_count(st, &g, &r.shape);
    EXPECT(hist == cold.search.evaluations, "history holds %zu of %zu evaluations", hist,
           cold.search.evaluations);
    /* The hints tie: the pick is the simplest of the fastest measured. */
    tuned__config simplest;
    EXPECT(simplest_fastest(st, &g, &r.shape, cold.search.best_us, &simplest) &&
               tuned__config_equal(&simplest, &cold.search.best) && cold.finalists >= 2,
           "finalists %zu: the winner is not the simplest of the fastest", cold.finalists);

    /* Again: everything measured is taken over, not measured again. */
    tuned__tune_outcome again;
    EXPECT(tuned__tune_on(&b, &g, &r, NULL, NULL, &again, &e) == 0, "again: %s", e.msg);
    EXPECT(again.search.resumed == hist, "resumed %zu of %zu", again.search.resumed, hist);
    {
        char a[TUNED__CONFIG_TEXT], c[TUNED__CONFIG_TEXT];
        tuned__config_format(&again.search.best, a, sizeof a);
        tuned__config_format(&cold.search.best, c, sizeof c);
        EXPECT(tuned__config_equal(&again.search.best, &cold.search.best), "another winner: %s, cold %s", a, c);
    }
    size_t hist2 = history_count(st, &g, &r.shape);
    EXPECT(hist2 == hist + again.search.evaluations, "history %zu after %zu new", hist2,
           again.search.evaluations);

    /* --retune: measured anew. */
    r.retune = true;
    tuned__tune_outcome re;
    EXPECT(tuned__tune_on(&b, &g, &r, NULL, NULL, &re, &e) == 0, "retune: %s", e.msg);
    EXPECT(re.search.resumed == 0 && re.search.evaluations >= cold.search.evaluations / 2,
           "retune resumed %zu, evaluated %zu", re.search.resumed, re.search.evaluations);
    r.retune = false;

    /* Warm start: the winner stored for this shape seeds a neighbour. */
    tuned__record rec;
    tuned__tune_record(&cold, &r.shape, &rec);
    EXPECT(tuned__store_put_best(st, &rec, &e) == 0, "put: %s", e.msg);
    tuned__tune_request near = r;
    near.shape.rows = 2048;
    tuned__tune_outcome warm;
    EXPECT(tuned__tune_on(&b, &g, &near, NULL, NULL, &warm, &e) == 0, "warm: %s", e.msg);
    EXPECT(warm.warm_seeds == 1, "warm seeds %zu", warm.warm_seeds);
    /* bf16 takes fp16's winner of the same shape as a seed; fp32, whose
     * vectors hold other element counts, does not. */
    tuned__tune_request sibling = r;
    sibling.shape.dtype = TUNED_BF16;
    EXPECT(tuned__tune_on(&b, &g, &sibling, NULL, NULL, &warm, &e) == 0, "bf16: %s", e.msg);
    EXPECT(warm.warm_seeds == 1, "bf16 warm seeds %zu", warm.warm_seeds);
    sibling.shape.dtype = TUNED_FP32;
    EXPECT(tuned__tune_on(&b, &g, &sibling, NULL, NULL, &warm, &e) == 0, "fp32: %s", e.msg);
    EXPECT(warm.warm_seeds == 0, "fp32 warm seeds %zu", warm.warm_seeds);

    /* The shape's record from another driver and NVRTC on this hardware
     * class, with this kernel code (the compatible tier), seeds the tune
     * here with its config; a retune does without it. */
    {
        tuned__gpu before_upgrade = g, after_upgrade = g;
        before_upgrade.driver_version = 12080;
        before_upgrade.nvrtc_major = 12;
        before_upgrade.nvrtc_minor = 8;
        after_upgrade.driver_version = 13000;
        after_upgrade.nvrtc_major = 13;
        before_upgrade.template_hash = after_upgrade.template_hash = 0x0123456789abcdefull;
        tuned__gpu_identify(&before_upgrade);
        tuned__gpu_identify(&after_upgrade);
        tuned__tune_request cr = r;
        cr.shape = (tuned__shape){TUNED_FP32, 1024, 4096, TUNED_KERNEL_SOFTMAX, 0};
        cr.search.budget = 30;
        tuned__tune_outcome old_tune, new_tune, fresh;
        EXPECT(tuned__tune_on(&b, &before_upgrade, &cr, NULL, NULL, &old_tune, &e) == 0,
               "before the upgrade: %s", e.msg);
        tuned__record crec;
        tuned__tune_record(&old_tune, &cr.shape, &crec);
        /* Its config: the slowest measured, which no search of the bowl
         * here would try on its own. */
        {
            tuned__store_key key;
            tuned__tune_key(&before_upgrade, &cr.shape, &key);
            static tuned__store_eval page[512];
            size_t n = 0, slowest = 0;
            EXPECT(tuned__store_list_evals(st, &key, NULL, page, 512, &n, &e) == 0 && n > 0,
                   "history before the upgrade: %s", e.msg);
            for (size_t i = 1; i < n; i++)
                if (page[i].median_us > page[slowest].median_us)
                    slowest = i;
            snprintf(crec.config, sizeof crec.config, "%s", page[slowest].config);
            crec.median_us = page[slowest].median_us;
        }
        EXPECT(tuned__store_put_best(st, &crec, &e) == 0, "put: %s", e.msg);
        EXPECT(!history_has(st, &after_upgrade, &cr.shape, crec.config), "history before");
        cr.search.seed += 7919; /* not the same random population as before */
        EXPECT(tuned__tune_on(&b, &after_upgrade, &cr, NULL, NULL, &new_tune, &e) == 0,
               "after the upgrade: %s", e.msg);
        EXPECT(new_tune.warm_seeds == 1, "compatible seeds %zu", new_tune.warm_seeds);
        EXPECT(history_has(st, &after_upgrade, &cr.shape, crec.config),
               "the compatible record's config %s was not measured after the upgrade",
               crec.config);
        cr.retune = true;
        EXPECT(tuned__tune_on(&b, &after_upgrade, &cr, NULL, NULL, &fresh, &e) == 0,
               "retune after the upgrade: %s", e.msg);
        EXPECT(fresh.warm_seeds == 0, "a retune took %zu seeds", fresh.warm_seeds);
        cr.retune = false;
    }

    /* Every kernel tunes in its own space (no reg=ex, no one-round pairs,
     * no grid split or tma for the backward kernels), is filed under its
     * own id with the bytes it moves (three tensors backward), and neither
     * resumes from nor is seeded by softmax's records of the shape. */
    for (unsigned kernel = TUNED_KERNEL_SOFTMAX_BWD; kernel <= TUNED__KIND_COUNT; kernel++) {
        const char *name = tuned__kernel_name((uint8_t)kernel);
        tuned__tune_request kr = r;
        kr.shape.kernel = (uint8_t)kernel;
        tuned__kind_example(tuned__kind(kernel), &kr.shape.cols, &kr.shape.params);
        tuned__space ksp;
        EXPECT(tuned__space_init(&ksp, &kr.shape, g.cc_major * 10 + g.cc_minor, g.sm_count,
                                 &e) == 0,
               "%s space: %s", name, e.msg);
        synthetic ks = {.space = &ksp};
        tuned__tune_backend kb = {.run = run, .ctx = &ks, .copy_us = 90.0};
        tuned__tune_outcome ko;
        EXPECT(tuned__tune_on(&kb, &g, &kr, NULL, NULL, &ko, &e) == 0, "%s: %s", name, e.msg);
        EXPECT(ko.search.found && ko.search.resumed == 0 && ko.warm_seeds == 0 &&
                   ko.search.evaluations > 0 && ks.outside == 0,
               "%s: found %d, resumed %zu, warm seeds %zu, %zu configs outside its space", name,
               ko.search.found, ko.search.resumed, ko.warm_seeds, ks.outside);
        EXPECT(tuned__space_valid(&ksp, &ko.search.best, NULL, 0), "%s: a winner outside", name);
        tuned__record krec;
        tuned__tune_record(&ko, &kr.shape, &krec);
        double bytes = tuned__kind_bytes(tuned__kind(kernel), 4096, tuned__wire_cols_of(&kr.shape), 2);
        EXPECT(krec.key.kernel == kernel &&
                   fabs(krec.gbps - bytes / (ko.search.best_us * 1e3)) < 1e-9 &&
                   krec.copy_us == 90.0,
               "%s record: kernel %u, %.3f GB/s", name, krec.key.kernel, krec.gbps);
        EXPECT(tuned__store_put_best(st, &krec, &e) == 0, "put %s: %s", name, e.msg);
        EXPECT(history_count(st, &g, &kr.shape) == ko.search.evaluations,
               "%s history: %zu of %zu", name, history_count(st, &g, &kr.shape),
               ko.search.evaluations);
        /* The stored records of the shape: softmax's and this one, apart. */
        tuned__record got;
        tuned__store_key key;
        tuned__tune_key(&g, &kr.shape, &key);
        EXPECT(tuned__store_get_best(st, &key, &got, krec.prov.policy, &e) == 0 &&
                   got.key.kernel == kernel && strcmp(got.config, krec.config) == 0,
               "%s: stored record not found under its kernel: %s", name, e.msg);
        tuned__space_free(&ksp);
    }

    /* A finalist slower in every round loses to the fastest even when it
     * is simpler and a noisy third finalist makes the spread large (the
     * rule before took the simplest within the largest spread: st=def). */
    synthetic noisy = {.noisy = true};
    tuned__tune_outcome sh;
    tune_synthetic(&noisy, &g, &r, 8192, &sh, "noisy");
    {
        char t[TUNED__CONFIG_TEXT];
        tuned__config_format(&sh.search.best, t, sizeof t);
        EXPECT(sh.search.best.st == TUNED__ST_CS && fabs(sh.search.best_us - 99.7) < 1e-9 &&
                   sh.noise > 0.01,
               "noisy finalists: %s at %.2f us won (noise %.3f), want st=cs at 99.70", t,
               sh.search.best_us, sh.noise);
    }

    /* Variants that share one median (a few-µs shape, the events' 32 ns
     * step) are told apart by their interquartile means: the lowest wins,
     * not the simplest of the plateau (the rule before). */
    synthetic flat = {.plateau = true};
    tuned__tune_outcome lv;
    tune_synthetic(&flat, &g, &r, 16384, &lv, "plateau");
    {
        char t[TUNED__CONFIG_TEXT], want[TUNED__CONFIG_TEXT];
        tuned__config_format(&lv.search.best, t, sizeof t);
        tuned__config_format(&flat.best, want, sizeof want);
        EXPECT(flat.seen && tuned__config_equal(&lv.search.best, &flat.best) &&
                   lv.search.best_us == 100.0,
               "plateau: %s won at %.3f us, want %s (the lowest mean)", t, lv.search.best_us,
               want);
    }

    /* Finalists that each fail the check of a finalist round (a race in
     * their template that the search's one check missed): none of them
     * wins, the tune fails, and their failures are in the history, so a
     * resumed tune does not take them for correct. */
    {
        static synthetic racy = {.wrong_again = true};
        tuned__tune_backend rb = {.run = run, .ctx = &racy, .copy_us = 90.0};
        tuned__tune_request rr = r;
        rr.shape.cols = 3072;
        rr.search.budget = 60;
        tuned__tune_outcome ro;
        tuned__err re_err = {0};
        int rc = tuned__tune_on(&rb, &g, &rr, NULL, NULL, &ro, &re_err);
        char t[TUNED__CONFIG_TEXT];
        tuned__config_format(&ro.search.best, t, sizeof t);
        EXPECT(rc == TUNED_EWRONG && strstr(re_err.msg, "finalists failed") != NULL,
               "every finalist wrong in its rounds: rc %d, winner %s (%s)", rc, t, re_err.msg);
        size_t n, wrong = 0;
        const tuned__store_eval *page = history_page(st, &g, &rr.shape, &n);
        for (size_t i = 0; page != NULL && i < n; i++)
            wrong += page[i].status == TUNED__HIST_WRONG;
        EXPECT(wrong >= 2, "the finalists' failures in the history: %zu of %zu entries wrong",
               wrong, n);
    }

    /* The configs to try first: measured in the first batch, before the
     * search's own seeds, on a fresh key (no history, no warm seed of its
     * own shape); one outside the space stops the tune before anything is
     * measured, naming the config. */
    {
        static synthetic tried = {.record = true};
        tuned__tune_backend tb = {.run = run, .ctx = &tried, .copy_us = 90.0};
        tuned__tune_request tr = r;
        tr.shape.cols = 6144;
        tr.search.budget = 30;
        const char *texts[] = {"w32.r1.c1.m1.v2.ld=cs.st=cs.reg=f32",
                               "w1.r2.c1.m2.v8.ld=nc.st=def.reg=pk"};
        for (size_t i = 0; i < 2; i++)
            EXPECT(tuned__config_parse(texts[i], &tr.tries[i], &e) == 0, "%s", e.msg);
        tr.ntries = 2;
        tuned__tune_outcome to;
        tuned__err te = {0};
        EXPECT(tuned__tune_on(&tb, &g, &tr, NULL, NULL, &to, &te) == 0, "tries: %s", te.msg);
        EXPECT(tried.nevaluated >= 2 && tuned__config_equal(&tried.evaluated[0], &tr.tries[0]) &&
                   tuned__config_equal(&tried.evaluated[1], &tr.tries[1]),
               "the configs to try were not measured first (%zu measured)", tried.nevaluated);
        EXPECT(history_has(st, &g, &tr.shape, texts[0]) && history_has(st, &g, &tr.shape, texts[1]),
               "the configs to try are not in the history");
        size_t before = tried.calls;
        tr.shape.cols = 5120;
        EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.sel=sort", &tr.tries[0],
                                   &e) == 0,
               "%s", e.msg);
        tr.ntries = 1;
        te = (tuned__err){0};
        EXPECT(tuned__tune_on(&tb, &g, &tr, NULL, NULL, &to, &te) == TUNED_EINVAL &&
                   strstr(te.msg, "sel=sort") != NULL && strstr(te.msg, "to try first") != NULL &&
                   tried.calls == before,
               "a config outside the space tried: %s (%zu measured)", te.msg,
               tried.calls - before);
    }

    /* A fatal error stops the tune; what was measured before it is kept. */
    synthetic dying = {.fail_after = 25};
    tuned__tune_backend bd = {.run = run, .ctx = &dying, .copy_us = 90.0};
    tuned__tune_request other = r;
    other.shape.cols = 2048;
    tuned__tune_outcome dead;
    EXPECT(tuned__tune_on(&bd, &g, &other, NULL, NULL, &dead, &e) == TUNED_ECUDA,
           "fatal error not returned");
    EXPECT(history_count(st, &g, &other.shape) == 25, "history after the fatal error: %zu",
           history_count(st, &g, &other.shape));

    tuned__store_close(st);
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("cold: %zu evaluations, %zu finalists; again: %zu resumed, %zu new; %d failures\n",
           cold.search.evaluations, cold.finalists, again.search.resumed, again.search.evaluations,
           failures);
    return failures ? 1 : 0;
}
