/* space.c: the constraints of the two families (register rows and tma)
 * and the moves of the search (neighbours, random draws, seeds). */
#include "src/tuner/space.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/source.h"
#include "tuned.h"

/* Registers a thread needs beside its part of the row (indices, the
 * reductions, addresses); measured around 20-24 in ptxas reports. */
#define REGISTER_OVERHEAD 24
#define MAX_REGISTERS_PER_THREAD 255
#define REGISTERS_PER_SM 65536
#define MAX_THREADS_PER_SM 2048
/* Unrolled vector accesses per thread; beyond this compile time and code
 * size explode for no gain. */
#define MAX_ITERS 64
/* Short rows: at most this many rows share a block. */
#define MAX_ROWS_PER_BLOCK 256
/* Shorter rows stay with the register family: a bulk copy per row would
 * cost more than it hides. */
#define MIN_TMA_ROW_BYTES 4096

static int why_not(char *why, size_t n, const char *fmt, ...) TUNED__PRINTF(3, 4);

static int why_not(char *why, size_t n, const char *fmt, ...)
{
    if (why != NULL && n > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return 0;
}

static bool pow2_in(unsigned v, unsigned lo, unsigned hi)
{
    return v >= lo && v <= hi && (v & (v - 1)) == 0;
}

/* The staged (TMA) family: rows long enough to be worth streaming, stages
 * that fit shared memory, every thread with work. */
static bool tma_valid(const tuned__space *sp, const tuned__config *c, char *why, size_t n)
{
    size_t esize = tuned_dtype_size(sp->shape.dtype);
    uint64_t row_bytes = sp->shape.cols * esize;
    if (sp->arch < 90)
        return why_not(why, n, "the bulk copy engine needs sm_90");
    if (c->rows != 1 || c->minb != 1 || c->vec != 0 || c->ld != 0 || c->reg != 0 || c->red != 0 ||
        c->grid != 0)
        return why_not(why, n, "tma variants fix rows, minb, vec, ld, reg, red and grid");
    if (!pow2_in(c->warps, 1, 32) || !pow2_in(c->cluster, 1, 16) || c->stages < 1 ||
        c->stages > 4 || c->st >= TUNED__ST_COUNT)
        return why_not(why, n, "warps 1..32, cluster 1..16 (powers of two), stages 1..4");
    if (row_bytes < MIN_TMA_ROW_BYTES)
        return why_not(why, n, "rows of %llu bytes are too short to stream",
                       (unsigned long long)row_bytes);
    uint64_t units = row_bytes / 16 / c->cluster;
    if (units * 2 < c->warps * 32u)
        return why_not(why, n, "%llu 16-byte units a block leave half of %u threads idle",
                       (unsigned long long)units, c->warps * 32u);
    size_t smem = tuned__source_dynamic_smem(c, &sp->shape);
    if (smem > TUNED__MAX_DYNAMIC_SMEM)
        return why_not(why, n, "%u stages of %zu bytes exceed shared memory", c->stages,
                       tuned__source_stage_bytes(c, &sp->shape));
    return true;
}

bool tuned__space_valid(const tuned__space *sp, const tuned__config *c, char *why, size_t n)
{
    size_t esize = tuned_dtype_size(sp->shape.dtype);
    uint64_t cols = sp->shape.cols, rows = sp->shape.rows;
    if (c->family == TUNED__FAMILY_TMA)
        return tma_valid(sp, c, why, n);
    if (c->family != TUNED__FAMILY_ROWS || c->stages != 0)
        return why_not(why, n, "unknown family %u", c->family);
    if (!pow2_in(c->warps, 1, 32))
        return why_not(why, n, "warps must be 1, 2, 4, 8, 16 or 32");
    if (!pow2_in(c->rows, 1, 32u * c->warps) || c->rows > MAX_ROWS_PER_BLOCK)
        return why_not(why, n, "rows per block must be a power of two up to the threads (%u)",
                       32u * c->warps);
    if (!pow2_in(c->minb, 1, 4) || c->warps * 32u * c->minb > MAX_THREADS_PER_SM)
        return why_not(why, n, "%u blocks of %u threads do not fit an SM", c->minb,
                       c->warps * 32u);
    if (!pow2_in(c->cluster, 1, 16))
        return why_not(why, n, "a cluster is 1, 2, 4, 8 or 16 blocks");
    if (c->cluster > 1 && sp->arch < 90)
        return why_not(why, n, "thread-block clusters need sm_90");
    if (c->cluster > 1 && c->rows != 1)
        return why_not(why, n, "a row split over a cluster takes the whole block");
    if (c->grid != 0 && !pow2_in(c->grid, 2, TUNED__GRID_MAX))
        return why_not(why, n, "a grid split is 2, 4, .. %d blocks", TUNED__GRID_MAX);
    if (c->grid > 1) {
        if (c->rows != 1 || c->cluster != 1 || c->red != TUNED__RED_FUSED)
            return why_not(why, n, "a row split over the grid takes whole blocks, no cluster "
                                   "and the one-round reduction");
        /* Every block must be resident at once: launch bounds leave room
         * for minb blocks on each SM. */
        uint64_t blocks = rows * c->grid;
        if (blocks > (uint64_t)sp->sms * c->minb || blocks > TUNED__GRID_MAX_BLOCKS)
            return why_not(why, n, "%llu blocks of a grid split do not fit %d SMs at %u a SM",
                           (unsigned long long)blocks, sp->sms, c->minb);
    }
    if (!pow2_in(c->vec, 1, 16) || c->vec * esize > 16)
        return why_not(why, n, "a vector of %u %s elements exceeds 16 bytes", c->vec,
                       tuned_dtype_name(sp->shape.dtype));
    if (c->ld >= TUNED__LD_COUNT || c->st >= TUNED__ST_COUNT || c->reg >= TUNED__REG_COUNT ||
        c->red >= TUNED__RED_COUNT)
        return why_not(why, n, "unknown cache hint, register mode or reduction");
    /* A row is read once, so evict_last gains a kernel nothing; it only
     * keeps the input in L2 afterwards, past an L2 flush too (measured on
     * the H200: 4-25% faster repeats on inputs that fit in L2), which skewed
     * every timing after it and would crowd the caller's own data out. */
    if (c->ld == TUNED__LD_EL)
        return why_not(why, n, "ld=el keeps the input in L2 after the kernel: not searched");
    if (c->reg != TUNED__REG_F32 && (esize != 2 || c->vec * esize < 4))
        return why_not(why, n, "packed registers need a 16-bit dtype and vectors of 4+ bytes");
    bool head_free = tuned__config_head_free(c, cols);
    uint64_t row_threads = (uint64_t)tuned__config_threads_per_row(c) * tuned__config_blocks_per_row(c);
    uint64_t slots = head_free ? cols : cols + c->vec - 1;
    if (row_threads > 1 && row_threads / 2 * c->vec >= slots)
        return why_not(why, n, "%llu threads a row leave half of them idle on %llu columns",
                       (unsigned long long)row_threads, (unsigned long long)cols);
    /* Up to a warp's worth of rows a block stays allowed: a shape with one
     * short row still needs some block. */
    if (c->rows > 32 && c->rows / 2 >= rows)
        return why_not(why, n, "%u rows a block leave half the block idle on %llu rows",
                       c->rows, (unsigned long long)rows);
    uint64_t blocks = (rows + c->rows - 1) / c->rows * tuned__config_blocks_per_row(c);
    if (blocks > 2147483647ull)
        return why_not(why, n, "%llu blocks exceed a grid", (unsigned long long)blocks);
    uint64_t iters = tuned__config_iters(c, cols, head_free);
    if (iters > MAX_ITERS)
        return why_not(why, n, "%llu vector accesses per thread (at most %d)",
                       (unsigned long long)iters, MAX_ITERS);
    unsigned threads = c->warps * 32u;
    unsigned budget = REGISTERS_PER_SM / (threads * c->minb);
    if (budget > MAX_REGISTERS_PER_THREAD)
        budget = MAX_REGISTERS_PER_THREAD;
    uint64_t need = tuned__config_row_registers(c, sp->shape.dtype, cols, head_free) +
                    REGISTER_OVERHEAD;
    if (need > budget)
        return why_not(why, n, "needs about %llu registers per thread, %u threads allow %u",
                       (unsigned long long)need, threads, budget);
    return true;
}

int tuned__space_init(tuned__space *sp, const tuned__shape *shape, int arch, int sms,
                      tuned__err *e)
{
    memset(sp, 0, sizeof *sp);
    sp->shape = *shape;
    sp->arch = arch;
    sp->sms = sms > 0 ? sms : 0;
    if (tuned_dtype_size(shape->dtype) == 0)
        return tuned__errf(e, TUNED_EINVAL, "space: unknown dtype %d", (int)shape->dtype);
    if (shape->rows < 1 || shape->rows > TUNED__MAX_ROWS || shape->cols < 1 ||
        shape->cols > TUNED__MAX_COLS)
        return tuned__errf(e, TUNED_EINVAL, "space: shape %llux%llu out of range",
                           (unsigned long long)shape->rows, (unsigned long long)shape->cols);
    /* warps x rows x cluster x minb x vec x hints x register modes x reductions */
    size_t cap = 6 * 9 * 5 * 3 * 4 * TUNED__LD_COUNT * TUNED__ST_COUNT * TUNED__REG_COUNT *
                     TUNED__RED_COUNT +
                 6 * 5 * 4 * TUNED__ST_COUNT +
                 /* grid splits: warps x splits x minb x vec x hints x register modes */
                 6 * 8 * 3 * 4 * TUNED__LD_COUNT * TUNED__ST_COUNT * TUNED__REG_COUNT;
    sp->valid = malloc(cap * sizeof *sp->valid);
    if (sp->valid == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "space: out of memory");
    for (unsigned w = 1; w <= 32; w *= 2)
        for (unsigned r = 1; r <= 32 * w && r <= MAX_ROWS_PER_BLOCK; r *= 2)
            for (unsigned cl = 1; cl <= 16; cl *= 2)
              for (unsigned mb = 1; mb <= 4; mb *= 2)
                for (unsigned v = 1; v <= 8; v *= 2)
                    for (unsigned ld = 0; ld < TUNED__LD_COUNT; ld++)
                        for (unsigned st = 0; st < TUNED__ST_COUNT; st++)
                            for (unsigned reg = 0; reg < TUNED__REG_COUNT; reg++)
                              for (unsigned red = 0; red < TUNED__RED_COUNT; red++) {
                                tuned__config c = {
                                    .family = TUNED__FAMILY_ROWS, .warps = (uint8_t)w,
                                    .rows = (uint16_t)r, .cluster = (uint8_t)cl,
                                    .minb = (uint8_t)mb,
                                    .vec = (uint8_t)v, .ld = (uint8_t)ld, .st = (uint8_t)st,
                                    .reg = (uint8_t)reg, .red = (uint8_t)red};
                                if (tuned__space_valid(sp, &c, NULL, 0) && sp->count < cap)
                                    sp->valid[sp->count++] = c;
                              }
    for (unsigned w = 1; w <= 32; w *= 2)
        for (unsigned g = 2; g <= TUNED__GRID_MAX && sp->sms > 0; g *= 2)
            for (unsigned mb = 1; mb <= 4; mb *= 2)
                for (unsigned v = 1; v <= 8; v *= 2)
                    for (unsigned ld = 0; ld < TUNED__LD_COUNT; ld++)
                        for (unsigned st = 0; st < TUNED__ST_COUNT; st++)
                            for (unsigned reg = 0; reg < TUNED__REG_COUNT; reg++) {
                                tuned__config c = {
                                    .family = TUNED__FAMILY_ROWS, .warps = (uint8_t)w, .rows = 1,
                                    .cluster = 1, .minb = (uint8_t)mb, .vec = (uint8_t)v,
                                    .ld = (uint8_t)ld, .st = (uint8_t)st, .reg = (uint8_t)reg,
                                    .red = TUNED__RED_FUSED, .grid = (uint16_t)g};
                                if (tuned__space_valid(sp, &c, NULL, 0) && sp->count < cap)
                                    sp->valid[sp->count++] = c;
                            }
    for (unsigned w = 1; w <= 32; w *= 2)
        for (unsigned cl = 1; cl <= 16; cl *= 2)
            for (unsigned stages = 1; stages <= 4; stages++)
                for (unsigned st = 0; st < TUNED__ST_COUNT; st++) {
                    tuned__config c = {.family = TUNED__FAMILY_TMA, .warps = (uint8_t)w,
                                       .rows = 1, .cluster = (uint8_t)cl, .minb = 1,
                                       .st = (uint8_t)st, .stages = (uint8_t)stages};
                    if (tuned__space_valid(sp, &c, NULL, 0) && sp->count < cap)
                        sp->valid[sp->count++] = c;
                }
    if (sp->count == 0) {
        char why[256];
        tuned__config widest = {
            .family = TUNED__FAMILY_ROWS, .warps = 32, .rows = 1,
            .cluster = (uint8_t)(arch >= 90 ? 16 : 1), .minb = 1,
            .vec = (uint8_t)(16 / tuned_dtype_size(shape->dtype)), .ld = TUNED__LD_DEF,
            .st = TUNED__ST_DEF,
            .reg = shape->dtype == TUNED_FP32 ? TUNED__REG_F32 : TUNED__REG_PK};
        tuned__space_valid(sp, &widest, why, sizeof why);
        tuned__space_free(sp);
        return tuned__errf(e, TUNED_ENOSPACE,
                           "space: no variant fits %llux%llu %s (the widest register-row "
                           "variant, %u threads a row: %s)",
                           (unsigned long long)shape->rows, (unsigned long long)shape->cols,
                           tuned_dtype_name(shape->dtype), 1024u * widest.cluster, why);
    }
    return 0;
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

/* tma: warps, cluster and stages one step, the store hint flipped. */
static size_t tma_neighbors(const tuned__space *sp, const tuned__config *c, tuned__config *out,
                            size_t cap)
{
    size_t n = 0;
    tuned__config m;
    for (int up = 0; up < 2; up++) {
        m = *c, m.warps = up ? c->warps * 2 : c->warps / 2;
        add_move(sp, &m, out, cap, &n);
        m = *c, m.cluster = up ? c->cluster * 2 : c->cluster / 2;
        add_move(sp, &m, out, cap, &n);
        m = *c, m.cluster = up ? c->cluster * 2 : c->cluster / 2;
        m.warps = up ? c->warps / 2 : c->warps * 2;
        add_move(sp, &m, out, cap, &n);
        m = *c, m.stages = (uint8_t)(up ? c->stages + 1 : c->stages - 1);
        add_move(sp, &m, out, cap, &n);
    }
    m = *c, m.st = c->st == TUNED__ST_DEF ? TUNED__ST_CS : TUNED__ST_DEF;
    add_move(sp, &m, out, cap, &n);
    return n < cap ? n : cap;
}

size_t tuned__space_neighbors(const tuned__space *sp, const tuned__config *c, tuned__config *out,
                              size_t cap)
{
    if (c->family == TUNED__FAMILY_TMA)
        return tma_neighbors(sp, c, out, cap);
    size_t n = 0;
    tuned__config m;
    for (int up = 0; up < 2; up++) {
        m = *c, m.warps = up ? c->warps * 2 : c->warps / 2;
        add_move(sp, &m, out, cap, &n);
        m = *c, m.rows = up ? c->rows * 2 : c->rows / 2;
        add_move(sp, &m, out, cap, &n);
        m = *c, m.warps = up ? c->warps * 2 : c->warps / 2, m.rows = up ? c->rows * 2 : c->rows / 2;
        add_move(sp, &m, out, cap, &n);
        m = *c, m.vec = up ? c->vec * 2 : c->vec / 2;
        add_move(sp, &m, out, cap, &n);
        m = *c, m.cluster = up ? c->cluster * 2 : c->cluster / 2;
        add_move(sp, &m, out, cap, &n);
        m = *c, m.minb = up ? c->minb * 2 : c->minb / 2;
        add_move(sp, &m, out, cap, &n);
        /* the same threads a row, in more and smaller blocks or fewer and larger */
        m = *c, m.cluster = up ? c->cluster * 2 : c->cluster / 2;
        m.warps = up ? c->warps / 2 : c->warps * 2;
        add_move(sp, &m, out, cap, &n);
        /* the same for a grid split, and the split itself; from 2 blocks
         * down to none, and from none to 2 (with the reduction it needs) */
        unsigned g = c->grid > 1 ? c->grid : 1;
        if (up || g > 1) {
            unsigned g2 = up ? g * 2 : g / 2;
            m = *c, m.grid = (uint16_t)(g2 > 1 ? g2 : 0);
            m.red = g2 > 1 ? TUNED__RED_FUSED : c->red;
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
    return n < cap ? n : cap;
}

void tuned__space_random(const tuned__space *sp, tuned__rng *rng, tuned__config *out)
{
    *out = sp->valid[tuned__rng_below(rng, sp->count)];
}

size_t tuned__space_seeds(const tuned__space *sp, tuned__config *out, size_t cap)
{
    size_t n = 0;
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
                           .reg = TUNED__REG_F32,
                           /* a cluster exchanges once, not twice (measured:
                            * the clustered long rows' winners are fused) */
                           .red = cluster > 1 ? TUNED__RED_FUSED : TUNED__RED_SPLIT};
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
                                   .red = TUNED__RED_FUSED};
                size_t before = n;
                for (unsigned minb = 4; minb >= 1 && n == before; minb /= 2) {
                    c.minb = (uint8_t)minb;
                    add_move(sp, &c, out, cap, &n);
                }
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
                                   .red = TUNED__RED_FUSED, .grid = (uint16_t)g};
                add_move(sp, &c, out, cap, &n);
            }
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
