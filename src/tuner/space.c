/* space.c: the search's policy over the valid configs: which values the
 * space enumerates, what it leaves out on purpose, and the moves of the
 * search (neighbours, random draws, seeds). What a config may be at all is
 * tuned__config_check's (src/codegen/config.c); a config of the space is
 * one that passes it and the policy here. */
#include "src/tuner/space.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuned.h"

/* Unrolled vector accesses per thread the search tries; beyond this
 * compile time and code size grow for no gain. */
#define SEARCH_MAX_ITERS 64
/* Short rows: at most this many rows share a block. */
#define MAX_ROWS_PER_BLOCK 256
/* Shorter rows stay with the register family: a bulk copy per row would
 * cost more than it hides. */
#define MIN_TMA_ROW_BYTES 4096
/* Most clusters holding one row the search tries. */
#define SEARCH_MAX_REPLICAS 4

/* ---- policy ---- */

/* Streamed rows: long enough to be worth streaming, every thread with work. */
static bool tma_policy(const tuned__space *sp, const tuned__config *c, char *why, size_t n)
{
    uint64_t row_bytes = sp->shape.cols * tuned_dtype_size(sp->shape.dtype);
    if (row_bytes < MIN_TMA_ROW_BYTES)
        return tuned__config_refuse(why, n, "rows of %llu bytes are too short to stream",
                                    (unsigned long long)row_bytes);
    uint64_t units = row_bytes / 16 / c->cluster;
    if (units * 2 < c->warps * 32u)
        return tuned__config_refuse(why, n,
                                    "%llu 16-byte units a block leave half of %u threads idle",
                                    (unsigned long long)units, c->warps * 32u);
    return true;
}

/* Half a thread's passes of a row of the space's shape under c (rows on a
 * vector boundary): the stash size the space holds. */
static unsigned stash_half(const tuned__space *sp, const tuned__config *c)
{
    /* A move may have halved a field to 0: no stash for what is no config. */
    if (c->vec == 0 || c->rows == 0 || c->cluster == 0 || tuned__config_threads_per_row(c) == 0)
        return 0;
    bool head_free = tuned__config_head_free(c, sp->shape.cols);
    uint64_t half = tuned__config_iters(c, &sp->shape, head_free) / 2;
    return half <= TUNED__MAX_STASH ? (unsigned)half : 0;
}

/* Replicas serve few rows on a GPU they leave mostly idle: every
 * replica's blocks on SMs of their own (at most half the SMs in all),
 * a pass for each to store, no stash beside them, and at most 4 (8
 * clusters loading one row from L2 were slower than 4: measured). */
static bool replicas_policy(const tuned__space *sp, const tuned__config *c, uint64_t iters,
                            char *why, size_t n)
{
    uint64_t blocks = sp->shape.rows * tuned__config_launch_blocks_per_row(c);
    if (sp->sms == 0 || blocks > (uint64_t)sp->sms / 2)
        return tuned__config_refuse(why, n, "%llu blocks of replicas need %llu SMs and more",
                                    (unsigned long long)blocks, (unsigned long long)blocks * 2);
    if (c->replicas > SEARCH_MAX_REPLICAS || c->replicas > iters || c->stash > 0)
        return tuned__config_refuse(why, n, "the space holds 2 or %d replicas, each with a pass "
                                            "to store, and no stash beside them",
                                    SEARCH_MAX_REPLICAS);
    return true;
}

/* Register rows: no variant that only repeats another or idles half its
 * threads, and none that leaves the input in L2 for the caller's timing. */
static bool rows_policy(const tuned__space *sp, const tuned__config *c, char *why, size_t n)
{
    size_t esize = tuned_dtype_size(sp->shape.dtype);
    uint64_t cols = sp->shape.cols, rows = sp->shape.rows;
    if (c->rows > MAX_ROWS_PER_BLOCK)
        return tuned__config_refuse(why, n, "more than %d rows a block are not searched",
                                    MAX_ROWS_PER_BLOCK);
    if (c->grid > 1 && sp->sms == 0)
        return tuned__config_refuse(why, n, "no grid split without the GPU's SM count");
    /* Packing puts two 16-bit elements in a word: with fp32 or 2-byte
     * vectors there is nothing to pack, and the variant repeats reg=f32. */
    if (c->reg == TUNED__REG_PK && (esize != 2 || c->vec * esize < 4))
        return tuned__config_refuse(
            why, n, "packed registers need a 16-bit dtype and vectors of 4+ bytes");
    bool head_free = tuned__config_head_free(c, cols);
    uint64_t row_threads =
        (uint64_t)tuned__config_threads_per_row(c) * tuned__config_blocks_per_row(c);
    uint64_t slots = head_free ? cols : cols + c->vec - 1;
    if (row_threads > 1 && row_threads / 2 * c->vec >= slots)
        return tuned__config_refuse(why, n,
                                    "%llu threads a row leave half of them idle on %llu columns",
                                    (unsigned long long)row_threads, (unsigned long long)cols);
    /* Up to a warp's worth of rows a block stays allowed: a shape with one
     * short row still needs some block. */
    if (c->rows > 32 && c->rows / 2 >= rows)
        return tuned__config_refuse(why, n,
                                    "%u rows a block leave half the block idle on %llu rows",
                                    c->rows, (unsigned long long)rows);
    uint64_t iters = tuned__config_iters(c, &sp->shape, head_free);
    if (iters > SEARCH_MAX_ITERS)
        return tuned__config_refuse(why, n, "%llu vector accesses per thread (at most %d)",
                                    (unsigned long long)iters, SEARCH_MAX_ITERS);
    /* A stash serves rows cut over a cluster whose parts the registers of
     * these blocks cannot hold (fp32 rows of 262144 at 4 blocks of 8 warps
     * an SM); the space holds one size of it, half the passes. */
    if (c->stash > 0) {
        tuned__config held = *c;
        held.stash = 0;
        if (c->cluster < 2 || c->stash != stash_half(sp, c))
            return tuned__config_refuse(why, n, "the space keeps half of a clustered row's "
                                                "passes in a stash, or none");
        if (tuned__config_check(&held, &sp->shape, sp->arch, sp->sms, NULL, 0))
            return tuned__config_refuse(why, n, "the registers hold the row without a stash");
    }
    if (c->replicas > 1 && !replicas_policy(sp, c, iters, why, n))
        return false;
    return true;
}

bool tuned__space_valid(const tuned__space *sp, const tuned__config *c, char *why, size_t n)
{
    if (!tuned__config_check(c, &sp->shape, sp->arch, sp->sms, why, n))
        return false;
    if (c->family == TUNED__FAMILY_CHUNK)
        return tuned__space_chunk_policy(sp, c, why, n);
    return c->family == TUNED__FAMILY_TMA ? tma_policy(sp, c, why, n) : rows_policy(sp, c, why, n);
}

/* The reduction of a row over several blocks (a grid split, a cluster's
 * seed) for the space's kernel: one-round (max, sum) pairs forward, the
 * one sum backward. */
static uint8_t grid_red(const tuned__space *sp)
{
    return tuned__shape_spec(&sp->shape)->pairs ? TUNED__RED_FUSED : TUNED__RED_SPLIT;
}

/* ---- enumeration ---- */

/* Called with each valid config in enumeration order; false stops it. */
typedef bool (*visit_fn)(void *ctx, const tuned__config *c);

/* Visits c if it is valid; false when the visit stopped the enumeration. */
static bool offer(const tuned__space *sp, const tuned__config *c, visit_fn visit, void *ctx)
{
    return !tuned__space_valid(sp, c, NULL, 0) || visit(ctx, c);
}

/* Offers c with every vector width, load and store hint and register mode,
 * and every reduction when all_reds (else c's own), then every selection
 * method of a kind that selects, then each place of the renormalised
 * terms of a kind that has them, in that order; with stashed, each with
 * half its passes in a stash. */
static bool offer_per_vector(const tuned__space *sp, tuned__config c, bool all_reds, bool stashed,
                             visit_fn visit, void *ctx)
{
    unsigned red_first = all_reds ? 0 : c.red, red_last = all_reds ? TUNED__RED_COUNT - 1 : c.red;
    /* a kind without a selection has the scan alone, and one without
     * renormalised terms their one place: its order is as before (the
     * check refuses terms=lanes where the key does not renormalise) */
    const tuned__kind_spec *k = tuned__shape_spec(&sp->shape);
    unsigned sels = k->selects ? TUNED__SEL_COUNT : 1;
    unsigned terms_count = k->terms_param != 0 ? TUNED__TERMS_COUNT : 1;
    for (unsigned v = 1; v <= 8; v *= 2)
        for (unsigned ld = 0; ld < TUNED__LD_COUNT; ld++)
            for (unsigned st = 0; st < TUNED__ST_COUNT; st++)
                for (unsigned reg = 0; reg < TUNED__REG_COUNT; reg++)
                    for (unsigned red = red_first; red <= red_last; red++)
                        for (unsigned sel = 0; sel < sels; sel++)
                            for (unsigned terms = 0; terms < terms_count; terms++) {
                                c.vec = (uint8_t)v, c.ld = (uint8_t)ld, c.st = (uint8_t)st;
                                c.reg = (uint8_t)reg, c.red = (uint8_t)red;
                                c.sel = (uint8_t)sel, c.terms = (uint8_t)terms;
                                c.stash = (uint8_t)(stashed ? stash_half(sp, &c) : 0);
                                if (stashed && c.stash == 0)
                                    continue;
                                if (!offer(sp, &c, visit, ctx))
                                    return false;
                            }
    return true;
}

/* Every config the space holds, in its order (the search's seeded draws
 * index it: changing the order changes every tune): register rows by
 * warps, rows a block, cluster and blocks per SM; then rows split over the
 * grid; then streamed rows; then clustered rows with a stash; then
 * clustered rows held by replicas. False when a visit stopped it. */
static bool enumerate(const tuned__space *sp, visit_fn visit, void *ctx)
{
    if (tuned__space_chunked(sp)) {
        tuned__config chunks[40];
        size_t nc = tuned__space_chunk_list(sp, chunks, sizeof chunks / sizeof chunks[0]);
        for (size_t i = 0; i < nc && i < sizeof chunks / sizeof chunks[0]; i++)
            if (!offer(sp, &chunks[i], visit, ctx))
                return false;
        return true;
    }
    for (unsigned w = 1; w <= 32; w *= 2)
        for (unsigned r = 1; r <= 32 * w && r <= MAX_ROWS_PER_BLOCK; r *= 2)
            for (unsigned cl = 1; cl <= 16; cl *= 2)
                for (unsigned mb = 1; mb <= 4; mb *= 2) {
                    tuned__config c = {.family = TUNED__FAMILY_ROWS, .warps = (uint8_t)w,
                                       .rows = (uint16_t)r, .cluster = (uint8_t)cl,
                                       .minb = (uint8_t)mb};
                    if (!offer_per_vector(sp, c, true, false, visit, ctx))
                        return false;
                }
    for (unsigned w = 1; w <= 32; w *= 2)
        for (unsigned g = 2; g <= TUNED__GRID_MAX && sp->sms > 0; g *= 2)
            for (unsigned mb = 1; mb <= 4; mb *= 2) {
                tuned__config c = {.family = TUNED__FAMILY_ROWS, .warps = (uint8_t)w, .rows = 1,
                                   .cluster = 1, .minb = (uint8_t)mb, .red = grid_red(sp),
                                   .grid = (uint16_t)g};
                if (!offer_per_vector(sp, c, false, false, visit, ctx))
                    return false;
            }
    for (unsigned w = 1; w <= 32; w *= 2)
        for (unsigned cl = 1; cl <= 16; cl *= 2)
            for (unsigned stages = 1; stages <= 4; stages++)
                for (unsigned st = 0; st < TUNED__ST_COUNT; st++) {
                    tuned__config c = {.family = TUNED__FAMILY_TMA, .warps = (uint8_t)w,
                                       .rows = 1, .cluster = (uint8_t)cl, .minb = 1,
                                       .st = (uint8_t)st, .stages = (uint8_t)stages};
                    if (!offer(sp, &c, visit, ctx))
                        return false;
                }
    for (unsigned w = 1; w <= 32; w *= 2)
        for (unsigned cl = 2; cl <= 16; cl *= 2)
            for (unsigned mb = 1; mb <= 4; mb *= 2) {
                tuned__config c = {.family = TUNED__FAMILY_ROWS, .warps = (uint8_t)w, .rows = 1,
                                   .cluster = (uint8_t)cl, .minb = (uint8_t)mb};
                if (!offer_per_vector(sp, c, true, true, visit, ctx))
                    return false;
            }
    for (unsigned w = 1; w <= 32; w *= 2)
        for (unsigned cl = 2; cl <= 16; cl *= 2)
            for (unsigned mb = 1; mb <= 4; mb *= 2)
                for (unsigned rep = 2; rep <= SEARCH_MAX_REPLICAS; rep *= 2) {
                    tuned__config c = {.family = TUNED__FAMILY_ROWS, .warps = (uint8_t)w,
                                       .rows = 1, .cluster = (uint8_t)cl, .minb = (uint8_t)mb,
                                       .replicas = (uint8_t)rep};
                    if (!offer_per_vector(sp, c, true, false, visit, ctx))
                        return false;
                }
    return true;
}

/* The configs of a space, in an array that doubles as it fills. */
typedef struct config_list {
    tuned__config *v;
    size_t n, cap;
    bool out_of_memory;
} config_list;

/* Doubles the list's room; false when memory ran out. */
static bool grow(config_list *l)
{
    size_t cap = l->cap > 0 ? l->cap * 2 : 256;
    tuned__config *v = realloc(l->v, cap * sizeof *v);
    if (v == NULL) {
        l->out_of_memory = true;
        return false;
    }
    l->v = v;
    l->cap = cap;
    return true;
}

static bool append(void *ctx, const tuned__config *c)
{
    config_list *l = ctx;
    if (l->n == l->cap && !grow(l))
        return false;
    l->v[l->n++] = *c;
    return true;
}

static bool take_first(void *ctx, const tuned__config *c)
{
    *(tuned__config *)ctx = *c;
    return false;
}

/* TUNED_ENOSPACE for a space without a valid config, with what keeps the
 * widest register-row variant out. */
static int no_space(const tuned__space *sp, tuned__err *e)
{
    char why[256];
    const tuned__shape *s = &sp->shape;
    tuned__config widest = {
        .family = TUNED__FAMILY_ROWS, .warps = 32, .rows = 1,
        .cluster = (uint8_t)(sp->arch >= 90 ? 16 : 1), .minb = 1,
        .vec = (uint8_t)(16 / tuned_dtype_size(s->dtype)), .ld = TUNED__LD_DEF,
        .st = TUNED__ST_DEF, .reg = s->dtype == TUNED_FP32 ? TUNED__REG_F32 : TUNED__REG_PK};
    tuned__space_valid(sp, &widest, why, sizeof why);
    return tuned__errf(e, TUNED_ENOSPACE,
                       "space: no variant fits %llux%llu %s (the widest register-row variant, "
                       "%u threads a row: %s)",
                       (unsigned long long)s->rows, (unsigned long long)s->cols,
                       tuned_dtype_name(s->dtype), 1024u * widest.cluster, why);
}

int tuned__space_rules(tuned__space *sp, const tuned__shape *shape, int arch, int sms,
                       tuned__err *e)
{
    memset(sp, 0, sizeof *sp);
    sp->shape = *shape;
    sp->arch = arch;
    sp->sms = sms > 0 ? sms : 0;
    char why[128];
    if (!tuned__shape_check(shape, why, sizeof why))
        return tuned__errf(e, TUNED_EINVAL, "space: %s", why);
    if (arch < 1)
        return tuned__errf(e, TUNED_EINVAL, "space: compute capability %d", arch);
    if (arch < TUNED__MIN_ARCH)
        return tuned__errf(e, TUNED_EUNSUPPORTED,
                           "space: tuned's kernels need sm_%d or newer; this GPU is sm_%d",
                           TUNED__MIN_ARCH, arch);
    return 0;
}

int tuned__space_init(tuned__space *sp, const tuned__shape *shape, int arch, int sms,
                      tuned__err *e)
{
    int rc = tuned__space_rules(sp, shape, arch, sms, e);
    if (rc != 0)
        return rc;
    config_list l = {0};
    enumerate(sp, append, &l);
    if (l.out_of_memory) {
        free(l.v);
        return tuned__errf(e, TUNED_ENOMEM, "space: out of memory for %zu configs", l.cap * 2);
    }
    if (l.n == 0)
        return no_space(sp, e);
    /* Give back the doubling's slack: a space lives as long as its tune. */
    tuned__config *fit = realloc(l.v, l.n * sizeof *fit);
    sp->valid = fit != NULL ? fit : l.v;
    sp->count = l.n;
    return 0;
}

int tuned__space_default(const tuned__space *sp, tuned__config *out, tuned__err *e)
{
    if (tuned__space_seeds(sp, out, 1) == 1)
        return 0;
    if (sp->count > 0) {
        *out = sp->valid[0];
        return 0;
    }
    if (!enumerate(sp, take_first, out))
        return 0; /* stopped at the first */
    return no_space(sp, e);
}

void tuned__space_free(tuned__space *sp)
{
    free(sp->valid);
    sp->valid = NULL;
    sp->count = 0;
}

/* Appends c to out if it is valid and not already there; counts it. */
static void add_move(const tuned__space *sp, const tuned__config *c, tuned__config *out,
                     size_t cap, size_t *n)
{
    if (!tuned__space_valid(sp, c, NULL, 0))
        return;
    for (size_t i = 0; i < *n && i < cap; i++)
        if (tuned__config_equal(&out[i], c))
            return;
    if (*n < cap)
        out[*n] = *c;
    (*n)++;
}

/* A move of the search: the fields in grow doubled and those in shrink
 * halved (a step up), or the other way round (a step down); stages go one
 * up or down instead. */
enum { F_WARPS = 1, F_ROWS = 2, F_VEC = 4, F_CLUSTER = 8, F_MINB = 16, F_STAGES = 32 };
typedef struct move {
    unsigned grow, shrink;
} move;

/* Register rows, in the order their neighbours are listed: warps, rows,
 * both (the same threads a row), vectors, cluster, blocks per SM, and the
 * same threads a row in more and smaller blocks or fewer and larger. */
static const move rows_moves[] = {
    {F_WARPS, 0}, {F_ROWS, 0}, {F_WARPS | F_ROWS, 0}, {F_VEC, 0},
    {F_CLUSTER, 0}, {F_MINB, 0}, {F_CLUSTER, F_WARPS},
};
/* Streamed rows: warps, cluster, both (the same threads a row), stages. */
static const move tma_moves[] = {{F_WARPS, 0}, {F_CLUSTER, 0}, {F_CLUSTER, F_WARPS}, {F_STAGES, 0}};

static unsigned scaled(unsigned v, unsigned field, unsigned larger, unsigned smaller)
{
    return (larger & field) != 0 ? v * 2 : (smaller & field) != 0 ? v / 2 : v;
}

/* Adds the valid configs each move of moves makes from c, one step up or down. */
static void add_moves(const tuned__space *sp, const tuned__config *c, const move *moves,
                      size_t nmoves, bool up, tuned__config *out, size_t cap, size_t *n)
{
    for (size_t i = 0; i < nmoves; i++) {
        unsigned larger = up ? moves[i].grow : moves[i].shrink;
        unsigned smaller = up ? moves[i].shrink : moves[i].grow;
        tuned__config m = *c;
        m.warps = (uint8_t)scaled(c->warps, F_WARPS, larger, smaller);
        m.rows = (uint16_t)scaled(c->rows, F_ROWS, larger, smaller);
        m.vec = (uint8_t)scaled(c->vec, F_VEC, larger, smaller);
        m.cluster = (uint8_t)scaled(c->cluster, F_CLUSTER, larger, smaller);
        m.minb = (uint8_t)scaled(c->minb, F_MINB, larger, smaller);
        m.stages = (uint8_t)((larger & F_STAGES) != 0    ? c->stages + 1
                             : (smaller & F_STAGES) != 0 ? c->stages - 1
                                                         : c->stages);
        if (c->stash > 0)
            m.stash = (uint8_t)stash_half(sp, &m);
        add_move(sp, &m, out, cap, n);
    }
}

/* tma: the moves one step each way, the store hint flipped. */
static size_t tma_neighbors(const tuned__space *sp, const tuned__config *c, tuned__config *out,
                            size_t cap)
{
    size_t n = 0;
    for (int up = 0; up < 2; up++)
        add_moves(sp, c, tma_moves, sizeof tma_moves / sizeof tma_moves[0], up, out, cap, &n);
    tuned__config m = *c;
    m.st = c->st == TUNED__ST_DEF ? TUNED__ST_CS : TUNED__ST_DEF;
    add_move(sp, &m, out, cap, &n);
    return n < cap ? n : cap;
}

/* A chunk: twice and half its rows (each in the fewest blocks that fit),
 * and the budget's own chunk. */
static size_t chunk_neighbors(const tuned__space *sp, const tuned__config *c, tuned__config *out,
                              size_t cap)
{
    size_t n = 0;
    tuned__config m;
    if (tuned__chunk_at(&sp->shape, c->chunk * 2, &m))
        add_move(sp, &m, out, cap, &n);
    if (tuned__chunk_at(&sp->shape, c->chunk / 2, &m))
        add_move(sp, &m, out, cap, &n);
    m = (tuned__config){.family = TUNED__FAMILY_CHUNK, .chunk = tuned__chunk_rule(&sp->shape)};
    if (!tuned__config_equal(&m, c))
        add_move(sp, &m, out, cap, &n);
    return n < cap ? n : cap;
}

size_t tuned__space_neighbors(const tuned__space *sp, const tuned__config *c, tuned__config *out,
                              size_t cap)
{
    if (c->family == TUNED__FAMILY_CHUNK)
        return chunk_neighbors(sp, c, out, cap);
    if (c->family == TUNED__FAMILY_TMA)
        return tma_neighbors(sp, c, out, cap);
    size_t n = 0;
    tuned__config m;
    for (int up = 0; up < 2; up++) {
        add_moves(sp, c, rows_moves, sizeof rows_moves / sizeof rows_moves[0], up, out, cap, &n);
        /* the same for a grid split, and the split itself; from 2 blocks
         * down to none, and from none to 2 (with the reduction it needs) */
        unsigned g = c->grid > 1 ? c->grid : 1;
        if (up || g > 1) {
            unsigned g2 = up ? g * 2 : g / 2;
            m = *c, m.grid = (uint16_t)(g2 > 1 ? g2 : 0);
            m.red = g2 > 1 ? grid_red(sp) : c->red;
            add_move(sp, &m, out, cap, &n);
            m.warps = up ? c->warps / 2 : c->warps * 2;
            add_move(sp, &m, out, cap, &n);
        }
    }
    for (unsigned v = 0; v < TUNED__LD_COUNT; v++)
        if (v != c->ld)
            m = *c, m.ld = (uint8_t)v, add_move(sp, &m, out, cap, &n);
    for (unsigned v = 0; v < TUNED__ST_COUNT; v++)
        if (v != c->st)
            m = *c, m.st = (uint8_t)v, add_move(sp, &m, out, cap, &n);
    /* Register modes in order: fp32 values, packed words, packed exps
     * (each the one before with one thing changed): one step each way. */
    if (c->reg > 0)
        m = *c, m.reg = (uint8_t)(c->reg - 1), add_move(sp, &m, out, cap, &n);
    if (c->reg + 1 < TUNED__REG_COUNT)
        m = *c, m.reg = (uint8_t)(c->reg + 1), add_move(sp, &m, out, cap, &n);
    for (unsigned v = 0; v < TUNED__RED_COUNT; v++)
        if (v != c->red)
            m = *c, m.red = (uint8_t)v, add_move(sp, &m, out, cap, &n);
    for (unsigned v = 0; v < TUNED__SEL_COUNT; v++)
        if (v != c->sel)
            m = *c, m.sel = (uint8_t)v, add_move(sp, &m, out, cap, &n);
    for (unsigned v = 0; v < TUNED__TERMS_COUNT; v++)
        if (v != c->terms)
            m = *c, m.terms = (uint8_t)v, add_move(sp, &m, out, cap, &n);
    /* Half the passes into a stash, or the stash back into registers. */
    m = *c, m.stash = (uint8_t)(c->stash > 0 ? 0 : stash_half(sp, c));
    if (m.stash != c->stash)
        add_move(sp, &m, out, cap, &n);
    /* Twice the replicas, or half (one cluster a row below 2). */
    m = *c, m.replicas = (uint8_t)(c->replicas > 1 ? c->replicas * 2 : 2);
    add_move(sp, &m, out, cap, &n);
    m = *c, m.replicas = (uint8_t)(c->replicas > 2 ? c->replicas / 2 : 0);
    if (c->replicas > 1)
        add_move(sp, &m, out, cap, &n);
    return n < cap ? n : cap;
}

void tuned__space_random(const tuned__space *sp, tuned__rng *rng, tuned__config *out)
{
    *out = sp->valid[tuned__rng_below(rng, sp->count)];
}

/* The reduction a seed of a row over several blocks takes: one round of
 * pairs (a cluster exchanges once, not twice: measured, the clustered long
 * rows' winners are fused), except in the backward kernels, whose one
 * reduction is a plain sum. */
static uint8_t seed_red(const tuned__space *sp, unsigned blocks_per_row)
{
    return blocks_per_row > 1 ? grid_red(sp) : TUNED__RED_SPLIT;
}

/* Adds c at the most blocks per SM (4, then 2, then 1) the space holds
 * it with, with half its passes in a stash when stashed; whether one was
 * added. */
static bool add_most_blocks(const tuned__space *sp, tuned__config c, bool stashed,
                            tuned__config *out, size_t cap, size_t *n)
{
    size_t before = *n;
    for (unsigned minb = 4; minb >= 1 && *n == before; minb /= 2) {
        c.minb = (uint8_t)minb;
        if (stashed)
            c.stash = (uint8_t)stash_half(sp, &c);
        add_move(sp, &c, out, cap, n);
    }
    return *n != before;
}

size_t tuned__space_seeds(const tuned__space *sp, tuned__config *out, size_t cap)
{
    size_t n = 0;
    if (tuned__space_chunked(sp)) {
        /* the rule's chunk: what a call without a record takes */
        tuned__config c = {.family = TUNED__FAMILY_CHUNK, .chunk = tuned__chunk_rule(&sp->shape)};
        add_move(sp, &c, out, cap, &n);
        return n < cap ? n : cap;
    }
    uint8_t widest = (uint8_t)(16 / tuned_dtype_size(sp->shape.dtype));
    /* For each size of a row's thread group, from a quarter warp to a
     * 16-block cluster: the widest vectors, blocks of at least four warps
     * (several rows per block when a row needs fewer threads), and as many
     * blocks per SM as the registers allow (occupancy hides latency; the
     * landscapes show the best variants at the register limit). */
    for (unsigned row_threads = 8; row_threads <= 16384; row_threads *= 2) {
        unsigned cluster = row_threads > 1024 ? row_threads / 1024 : 1;
        unsigned per_block = row_threads / cluster;
        unsigned warps = per_block < 128 ? 4 : per_block / 32;
        tuned__config c = {.family = TUNED__FAMILY_ROWS, .warps = (uint8_t)warps,
                           .rows = (uint16_t)(warps * 32 / per_block), .cluster = (uint8_t)cluster,
                           .minb = 1,
                           .vec = widest, .ld = TUNED__LD_DEF, .st = TUNED__ST_DEF,
                           .reg = TUNED__REG_F32, .red = seed_red(sp, cluster)};
        size_t before = n;
        for (unsigned minb = 4; minb >= 1 && n == before; minb /= 2)
            for (unsigned reg = 0; reg <= TUNED__REG_PK && n == before; reg++) {
                c.reg = (uint8_t)reg;
                c.minb = (uint8_t)minb;
                add_move(sp, &c, out, cap, &n);
            }
    }
    /* Rows split over a cluster in small blocks (4 or 8 warps), in each
     * register mode at the most blocks per SM it allows: where the long
     * rows' best variants sit on H100 and H200 (8192x128256: w8.c8.m4 pk,
     * 32x128256: w4.c8.m2 f32), several moves away from the seeds above. */
    for (unsigned cluster = 2; cluster <= 16; cluster *= 2)
        for (unsigned warps = 4; warps <= 8; warps *= 2)
            for (unsigned reg = 0; reg <= TUNED__REG_PK; reg++) {
                tuned__config c = {.family = TUNED__FAMILY_ROWS, .warps = (uint8_t)warps,
                                   .rows = 1, .cluster = (uint8_t)cluster, .vec = widest,
                                   .ld = TUNED__LD_DEF, .st = TUNED__ST_DEF, .reg = (uint8_t)reg,
                                   .red = seed_red(sp, cluster)};
                /* Rows too long for these blocks' registers: half of
                 * each thread's passes in a stash. */
                if (!add_most_blocks(sp, c, false, out, cap, &n))
                    add_most_blocks(sp, c, true, out, cap, &n);
            }
    /* Few long rows over the whole GPU: as many blocks as fit on the SMs
     * at one a SM (the largest power of two), 4 or 8 warps, each register
     * mode. */
    if (sp->sms > 0 && sp->shape.rows <= (uint64_t)sp->sms / 2) {
        unsigned g = 2;
        while (g * 2 <= TUNED__GRID_MAX && sp->shape.rows * g * 2 <= (uint64_t)sp->sms)
            g *= 2;
        for (unsigned warps = 4; warps <= 8; warps *= 2)
            for (unsigned reg = 0; reg <= TUNED__REG_PK; reg++) {
                tuned__config c = {.family = TUNED__FAMILY_ROWS, .warps = (uint8_t)warps,
                                   .rows = 1, .cluster = 1, .minb = 1, .vec = widest,
                                   .ld = TUNED__LD_DEF, .st = TUNED__ST_DEF, .reg = (uint8_t)reg,
                                   .red = grid_red(sp), .grid = (uint16_t)g};
                add_move(sp, &c, out, cap, &n);
            }
    }
    /* Few long rows held by 4 clusters of 16 blocks of 8 warps, each
     * storing a quarter (1x128256 and 1x262144's best on the H200), in
     * each register mode. */
    for (unsigned reg = 0; reg < TUNED__REG_COUNT; reg++) {
        tuned__config c = {.family = TUNED__FAMILY_ROWS, .warps = 8, .rows = 1, .cluster = 16,
                           .vec = widest, .ld = TUNED__LD_DEF, .st = TUNED__ST_DEF,
                           .reg = (uint8_t)reg, .red = seed_red(sp, 16),
                           .replicas = SEARCH_MAX_REPLICAS};
        add_most_blocks(sp, c, false, out, cap, &n);
    }
    /* Streamed rows: 16 warps, as many stages as fit (up to 3). */
    for (unsigned cluster = 1; cluster <= 8; cluster *= 2)
        for (unsigned stages = 3; stages >= 1; stages--) {
            tuned__config c = {.family = TUNED__FAMILY_TMA, .warps = 16, .rows = 1,
                               .cluster = (uint8_t)cluster, .minb = 1, .st = TUNED__ST_DEF,
                               .stages = (uint8_t)stages};
            size_t before = n;
            add_move(sp, &c, out, cap, &n);
            if (n != before)
                break;
        }
    return n < cap ? n : cap;
}
