/* config.c: the text form of a kernel config, the per-row arithmetic
 * (vectors per thread, registers held), and tuned__config_check, the one
 * rule of what a config may be for a shape and a GPU, which the parser,
 * codegen and the tuner's space all apply. */
#include "src/codegen/config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/source.h"

static const char *const ld_names[TUNED__LD_COUNT] = {"def", "nc", "cs", "el"};
static const char *const st_names[TUNED__ST_COUNT] = {"def", "cs"};
static const char *const reg_names[TUNED__REG_COUNT] = {"f32", "pk", "ex"};
static const char *const red_names[TUNED__RED_COUNT] = {"split", "fused"};
static const char *const sel_names[TUNED__SEL_COUNT] = {"scan", "sort", "short", "net",
                                                         "merge", "rank"};
static const char *const terms_names[TUNED__TERMS_COUNT] = {"rounds", "lanes"};

const char *tuned__ld_name(unsigned ld)
{
    return ld < TUNED__LD_COUNT ? ld_names[ld] : "?";
}

const char *tuned__st_name(unsigned st)
{
    return st < TUNED__ST_COUNT ? st_names[st] : "?";
}

const char *tuned__reg_name(unsigned reg)
{
    return reg < TUNED__REG_COUNT ? reg_names[reg] : "?";
}

const char *tuned__red_name(unsigned red)
{
    return red < TUNED__RED_COUNT ? red_names[red] : "?";
}

void tuned__config_format(const tuned__config *c, char *buf, size_t n)
{
    if (c->family == TUNED__FAMILY_CHUNK) {
        if (c->splits > 0)
            snprintf(buf, n, "chunk%u.v%u", (unsigned)c->chunk, (unsigned)c->splits);
        else
            snprintf(buf, n, "chunk%u", (unsigned)c->chunk);
        return;
    }
    if (c->family == TUNED__FAMILY_TMA) {
        snprintf(buf, n, "tma.w%u.c%u.s%u.st=%s", c->warps, c->cluster, c->stages,
                 tuned__st_name(c->st));
        return;
    }
    /* The two-round reduction predates the field: leaving it out keeps
     * the text of every stored record and recorded landscape. */
    char last[24] = ""; /* the grid split, or the stash; then the replicas */
    if (c->grid > 1)
        snprintf(last, sizeof last, ".g%u", c->grid);
    else if (c->stash > 0)
        snprintf(last, sizeof last, ".stash%u", c->stash);
    if (c->replicas > 1)
        snprintf(last + strlen(last), sizeof last - strlen(last), ".rep%u", c->replicas);
    /* likewise the scan, the selection method before the field, and the
     * terms formed in the rounds, which came before theirs */
    char choice[32] = "";
    if (c->sel != TUNED__SEL_SCAN)
        snprintf(choice, sizeof choice, ".sel=%s",
                 c->sel < TUNED__SEL_COUNT ? sel_names[c->sel] : "?");
    if (c->terms != TUNED__TERMS_ROUNDS)
        snprintf(choice + strlen(choice), sizeof choice - strlen(choice), ".terms=%s",
                 c->terms < TUNED__TERMS_COUNT ? terms_names[c->terms] : "?");
    snprintf(buf, n, "w%u.r%u.c%u.m%u.v%u.ld=%s.st=%s.reg=%s%s%s%s%s", c->warps, c->rows,
             c->cluster, c->minb, c->vec, tuned__ld_name(c->ld), tuned__st_name(c->st),
             tuned__reg_name(c->reg), choice, c->red != TUNED__RED_SPLIT ? ".red=" : "",
             c->red != TUNED__RED_SPLIT ? tuned__red_name(c->red) : "", last);
}

static bool pow2_in(unsigned long v, unsigned long lo, unsigned long hi)
{
    return v >= lo && v <= hi && (v & (v - 1)) == 0;
}

/* Parses "<prefix><number>" with the number in 1..max, a power of two
 * unless any is set. */
static int parse_number(const char *field, const char *prefix, unsigned long max, bool any,
                        unsigned *out, const char *text, tuned__err *e)
{
    size_t plen = strlen(prefix);
    if (strncmp(field, prefix, plen) != 0 || field[plen] < '0' || field[plen] > '9')
        return tuned__errf(e, TUNED_EINVAL, "config '%s': expected '%s<number>' at '%s'", text,
                           prefix, field);
    char *end;
    errno = 0;
    unsigned long v = strtoul(field + plen, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > max || (!any && !pow2_in(v, 1, max)))
        return tuned__errf(e, TUNED_EINVAL, "config '%s': '%s' must be %s from 1 to %lu", text,
                           field, any ? "a number" : "a power of two", max);
    *out = (unsigned)v;
    return 0;
}

static int parse_num_field(const char *field, const char *prefix, unsigned long max,
                           unsigned *out, const char *text, tuned__err *e)
{
    return parse_number(field, prefix, max, false, out, text, e);
}

static int parse_named_field(const char *field, const char *prefix, const char *const *names,
                             unsigned count, uint8_t *out, const char *text, tuned__err *e)
{
    size_t plen = strlen(prefix);
    if (strncmp(field, prefix, plen) != 0)
        return tuned__errf(e, TUNED_EINVAL, "config '%s': expected '%s...' at '%s'", text, prefix,
                           field);
    for (unsigned i = 0; i < count; i++) {
        if (strcmp(field + plen, names[i]) == 0) {
            *out = (uint8_t)i;
            return 0;
        }
    }
    char allowed[128] = "";
    for (unsigned i = 0; i < count; i++) {
        strncat(allowed, names[i], sizeof allowed - strlen(allowed) - 1);
        if (i + 1 < count)
            strncat(allowed, "|", sizeof allowed - strlen(allowed) - 1);
    }
    return tuned__errf(e, TUNED_EINVAL, "config '%s': '%s' is not one of %s%s", text, field,
                       prefix, allowed);
}

/* Splits rest at its dots into fields (at most max). */
static int split_fields(const char *text, char *rest, char **fields, size_t max, size_t *nf,
                        tuned__err *e)
{
    char *save = NULL;
    *nf = 0;
    for (char *f = strtok_r(rest, ".", &save); f != NULL; f = strtok_r(NULL, ".", &save)) {
        if (*nf == max)
            return tuned__errf(e, TUNED_EINVAL, "config '%s': too many fields", text);
        fields[(*nf)++] = f;
    }
    return 0;
}

/* The parsed config c, refused unless the rules need no shape to accept it. */
static int parsed(const char *text, const tuned__config *c, tuned__config *out, tuned__err *e)
{
    char why[160];
    if (!tuned__config_check(c, NULL, 0, 0, why, sizeof why))
        return tuned__errf(e, TUNED_EINVAL, "config '%s': %s", text, why);
    *out = *c;
    return 0;
}

/* "tma.w16.c2.s3.st=cs" */
static int parse_tma(const char *text, char *rest, tuned__config *out, tuned__err *e)
{
    char *fields[4];
    size_t nf;
    int rc = split_fields(text, rest, fields, 4, &nf, e);
    if (rc != 0)
        return rc;
    if (nf != 4)
        return tuned__errf(e, TUNED_EINVAL,
                           "config '%s': expected 4 fields after tma., like tma.w16.c2.s3.st=cs",
                           text);
    tuned__config c = {.family = TUNED__FAMILY_TMA, .rows = 1, .minb = 1, .vec = 0};
    unsigned warps, cluster, stages;
    if ((rc = parse_num_field(fields[0], "w", 32, &warps, text, e)) != 0 ||
        (rc = parse_num_field(fields[1], "c", 16, &cluster, text, e)) != 0 ||
        (rc = parse_number(fields[2], "s", 4, true, &stages, text, e)) != 0 ||
        (rc = parse_named_field(fields[3], "st=", st_names, TUNED__ST_COUNT, &c.st, text, e)) != 0)
        return rc;
    c.warps = (uint8_t)warps;
    c.cluster = (uint8_t)cluster;
    c.stages = (uint8_t)stages;
    return parsed(text, &c, out, e);
}

int tuned__config_parse(const char *text, tuned__config *out, tuned__err *e)
{
    if (text == NULL || strlen(text) >= TUNED__CONFIG_TEXT)
        return tuned__errf(e, TUNED_EINVAL, "config: missing or longer than %d characters",
                           TUNED__CONFIG_TEXT - 1);
    char copy[TUNED__CONFIG_TEXT];
    strcpy(copy, text);
    if (strncmp(copy, "tma.", 4) == 0)
        return parse_tma(text, copy + 4, out, e);
    if (strncmp(copy, "chunk", 5) == 0) {
        /* "chunk1024", or "chunk2048.v17": rows, then vocabulary blocks */
        unsigned rows, splits = 0;
        char *blocks = strchr(copy, '.');
        if (blocks != NULL)
            *blocks++ = '\0';
        int rc = parse_number(copy, "chunk", TUNED__MAX_CHUNK, true, &rows, text, e);
        if (rc == 0 && blocks != NULL)
            rc = parse_number(blocks, "v", TUNED__MAX_SPLITS, true, &splits, text, e);
        if (rc != 0)
            return rc;
        tuned__config c = {.family = TUNED__FAMILY_CHUNK, .chunk = rows, .splits = (uint8_t)splits};
        return parsed(text, &c, out, e);
    }
    char *fields[12];
    size_t nf;
    int rc = split_fields(text, copy, fields, 12, &nf, e);
    if (rc != 0)
        return rc;
    if (nf < 8)
        return tuned__errf(e, TUNED_EINVAL,
                           "config '%s': expected 8 fields like w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32 "
                           "(and optionally .red=fused, then .g<blocks> or .stash<passes>, "
                           "then .rep<clusters>)",
                           text);
    tuned__config c = {.family = TUNED__FAMILY_ROWS};
    unsigned warps, rows, cluster, minb, vec, grid = 0, stash = 0, replicas = 0;
    if ((rc = parse_num_field(fields[0], "w", 32, &warps, text, e)) != 0 ||
        (rc = parse_num_field(fields[1], "r", 1024, &rows, text, e)) != 0 ||
        (rc = parse_num_field(fields[2], "c", 16, &cluster, text, e)) != 0 ||
        (rc = parse_num_field(fields[3], "m", 4, &minb, text, e)) != 0 ||
        (rc = parse_num_field(fields[4], "v", 8, &vec, text, e)) != 0 ||
        (rc = parse_named_field(fields[5], "ld=", ld_names, TUNED__LD_COUNT, &c.ld, text, e)) != 0 ||
        (rc = parse_named_field(fields[6], "st=", st_names, TUNED__ST_COUNT, &c.st, text, e)) != 0 ||
        (rc = parse_named_field(fields[7], "reg=", reg_names, TUNED__REG_COUNT, &c.reg, text, e)) != 0)
        return rc;
    /* Then .sel=..., which the scan leaves out, then .terms=..., which the
     * rounds' terms leave out, then .red=..., which the two-round reduction
     * leaves out, then .gN or .stashN, then .repN. */
    size_t next = 8;
    if (next < nf && strncmp(fields[next], "sel=", 4) == 0 &&
        (rc = parse_named_field(fields[next++], "sel=", sel_names, TUNED__SEL_COUNT, &c.sel, text,
                                e)) != 0)
        return rc;
    if (next < nf && strncmp(fields[next], "terms=", 6) == 0 &&
        (rc = parse_named_field(fields[next++], "terms=", terms_names, TUNED__TERMS_COUNT,
                                &c.terms, text, e)) != 0)
        return rc;
    if (next < nf && strncmp(fields[next], "red=", 4) == 0 &&
        (rc = parse_named_field(fields[next++], "red=", red_names, TUNED__RED_COUNT, &c.red, text,
                                e)) != 0)
        return rc;
    if (next < nf && strncmp(fields[next], "stash", 5) == 0) {
        if ((rc = parse_number(fields[next++], "stash", TUNED__MAX_STASH, true, &stash, text, e)) !=
            0)
            return rc;
    } else if (next < nf && strncmp(fields[next], "rep", 3) != 0 &&
               (rc = parse_num_field(fields[next++], "g", TUNED__GRID_MAX, &grid, text, e)) != 0) {
        return rc;
    }
    if (next < nf && strncmp(fields[next], "rep", 3) == 0 &&
        (rc = parse_num_field(fields[next++], "rep", TUNED__MAX_REPLICAS, &replicas, text, e)) != 0)
        return rc;
    if (next < nf)
        return tuned__errf(e, TUNED_EINVAL, "config '%s': unexpected '%s' after the %s", text,
                           fields[next],
                           replicas > 0 ? "replicas" : stash > 0 ? "stash" : "grid split");
    c.warps = (uint8_t)warps;
    c.rows = (uint16_t)rows;
    c.cluster = (uint8_t)cluster;
    c.minb = (uint8_t)minb;
    c.vec = (uint8_t)vec;
    c.grid = (uint16_t)grid;
    c.stash = (uint8_t)stash;
    c.replicas = (uint8_t)replicas;
    return parsed(text, &c, out, e);
}

int tuned__config_parse_canonical(const char *text, int code, tuned__config *out, tuned__err *e)
{
    tuned__config c;
    int rc = tuned__config_parse(text, &c, e);
    if (rc != 0) {
        if (e != NULL)
            e->code = code;
        return code;
    }
    char canon[TUNED__CONFIG_TEXT];
    tuned__config_format(&c, canon, sizeof canon);
    if (strcmp(canon, text) != 0)
        return tuned__errf(e, code, "config '%s' is not in canonical form ('%s')", text, canon);
    *out = c;
    return 0;
}

bool tuned__config_equal(const tuned__config *a, const tuned__config *b)
{
    return a->family == b->family && a->warps == b->warps && a->rows == b->rows &&
           a->cluster == b->cluster && a->minb == b->minb && a->vec == b->vec && a->ld == b->ld && a->st == b->st &&
           a->reg == b->reg && a->red == b->red && a->stages == b->stages && a->grid == b->grid &&
           a->stash == b->stash && a->replicas == b->replicas && a->sel == b->sel &&
           a->terms == b->terms &&
           a->chunk == b->chunk && a->splits == b->splits;
}

/* Elements one pass of all of a row's threads covers. */
static uint64_t pass_span(const tuned__config *c)
{
    return (uint64_t)tuned__config_threads_per_row(c) * tuned__config_blocks_per_row(c) * c->vec;
}

uint64_t tuned__config_iters(const tuned__config *c, const tuned__shape *s, bool head_free)
{
    if (c->family != TUNED__FAMILY_ROWS || c->vec == 0)
        return 0;
    uint64_t span = pass_span(c);
    /* A row starting `head` elements past the boundary its slots are
     * counted from covers cols + head <= cols + align - 1 slots. */
    uint64_t slots = head_free ? s->cols : s->cols + tuned__config_head_align(c, s) - 1;
    return (slots + span - 1) / span;
}

uint64_t tuned__config_row_registers(const tuned__config *c, const tuned__shape *s,
                                     bool head_free)
{
    uint64_t iters = tuned__config_iters(c, s, head_free);
    uint64_t elems = (iters > c->stash ? iters - c->stash : 0) * c->vec;
    if (c->reg == TUNED__REG_PK || c->reg == TUNED__REG_EX) {
        uint64_t bytes = elems * tuned_dtype_size(s->dtype);
        return (bytes + 3) / 4;
    }
    return elems;
}

/* ---- validity ---- */

/* Registers a thread needs beside its part of the row (indices, the
 * reductions, addresses); measured around 20-24 in ptxas reports. */
#define REGISTER_OVERHEAD 24
#define MAX_REGISTERS_PER_THREAD 255
#define REGISTERS_PER_SM 65536
#define MAX_THREADS_PER_SM 2048
/* Vector accesses per thread codegen unrolls at most, for rows starting
 * anywhere: the register budget keeps real configs far below; this keeps a
 * corrupt one from generating megabytes of code. */
#define MAX_ITERS 256

bool tuned__config_refuse(char *why, size_t n, const char *fmt, ...)
{
    if (why != NULL && n > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* The staged family: the fields its text form fixes, the copy engine of
 * sm_90, stages that fit shared memory. */
static bool tma_check(const tuned__config *c, const tuned__shape *s, int arch, char *why, size_t n)
{
    if (c->rows != 1 || c->minb != 1 || c->vec != 0 || c->ld != 0 || c->reg != 0 || c->red != 0 ||
        c->grid != 0 || c->stash != 0 || c->replicas != 0 || c->sel != 0 || c->terms != 0)
        return tuned__config_refuse(why, n, "tma variants fix rows, minb, vec, ld, reg, red, "
                                            "grid, stash, replicas, sel and terms");
    if (!pow2_in(c->warps, 1, 32) || !pow2_in(c->cluster, 1, 16) || c->stages < 1 ||
        c->stages > 4 || c->st >= TUNED__ST_COUNT)
        return tuned__config_refuse(why, n,
                                    "warps 1..32, cluster 1..16 (powers of two), stages 1..4");
    if (arch > 0 && arch < 90)
        return tuned__config_refuse(why, n, "the bulk copy engine needs sm_90");
    if (s != NULL && tuned__shape_spec(s)->path[TUNED__PATH_STAGED].entry == NULL)
        return tuned__config_refuse(why, n, "%s has no tma variants", tuned__shape_spec(s)->name);
    size_t smem = s != NULL ? tuned__source_dynamic_smem(c, s) : 0;
    if (smem > TUNED__MAX_DYNAMIC_SMEM)
        return tuned__config_refuse(why, n, "%u stages of %zu bytes exceed shared memory",
                                    c->stages, tuned__source_stage_bytes(c, s));
    return true;
}

/* What a register-row config is without a shape: a block of power-of-two
 * row groups (the reductions' xor shuffles stay inside aligned lane ranges
 * only then), clusters and grid splits of whole blocks, hints in range. */
static bool rows_check_fields(const tuned__config *c, int arch, char *why, size_t n)
{
    if (c->stages != 0)
        return tuned__config_refuse(why, n, "register-row variants have no stages");
    if (!pow2_in(c->warps, 1, 32))
        return tuned__config_refuse(why, n, "warps must be 1, 2, 4, 8, 16 or 32");
    if (!pow2_in(c->rows, 1, 32u * c->warps))
        return tuned__config_refuse(
            why, n, "rows per block must be a power of two up to the threads (%u)", 32u * c->warps);
    if (!pow2_in(c->minb, 1, 4) || c->warps * 32u * c->minb > MAX_THREADS_PER_SM)
        return tuned__config_refuse(why, n, "%u blocks of %u threads do not fit an SM", c->minb,
                                    c->warps * 32u);
    if (!pow2_in(c->cluster, 1, 16))
        return tuned__config_refuse(why, n, "a cluster is 1, 2, 4, 8 or 16 blocks");
    if (c->cluster > 1 && arch > 0 && arch < 90)
        return tuned__config_refuse(why, n, "thread-block clusters need sm_90");
    if (c->cluster > 1 && c->rows != 1)
        return tuned__config_refuse(why, n, "a row split over a cluster takes the whole block");
    if (c->grid != 0 && !pow2_in(c->grid, 2, TUNED__GRID_MAX))
        return tuned__config_refuse(why, n, "a grid split is 2, 4, .. %d blocks", TUNED__GRID_MAX);
    if (c->grid > 1 && (c->rows != 1 || c->cluster != 1))
        return tuned__config_refuse(why, n, "a row split over the grid takes whole blocks and "
                                            "no cluster");
    if (!pow2_in(c->vec, 1, 16))
        return tuned__config_refuse(why, n, "a vector is 1, 2, 4, 8 or 16 elements");
    if (c->stash > 0 && c->grid > 1)
        return tuned__config_refuse(why, n, "a row split over the grid keeps no stash");
    if (c->stash > 0 && c->reg == TUNED__REG_EX)
        return tuned__config_refuse(why, n, "stashed passes keep their inputs: no reg=ex");
    if (c->replicas != 0 && !pow2_in(c->replicas, 2, TUNED__MAX_REPLICAS))
        return tuned__config_refuse(why, n, "replicas are 2, 4 or 8 clusters");
    if (c->replicas > 1 && (c->cluster < 2 || c->grid > 1))
        return tuned__config_refuse(why, n, "replicas hold a row cut over a cluster, no grid split");
    if (c->ld >= TUNED__LD_COUNT || c->st >= TUNED__ST_COUNT || c->reg >= TUNED__REG_COUNT ||
        c->red >= TUNED__RED_COUNT || c->sel >= TUNED__SEL_COUNT ||
        c->terms >= TUNED__TERMS_COUNT)
        return tuned__config_refuse(why, n, "unknown cache hint, register mode, reduction, "
                                            "selection or terms");
    return true;
}

/* What the shape's kind has of the register-row family (its spec): a
 * kind with one reduction (a sum) has no one-round pairs, and a grid split
 * of a kind with (max, sum) reduces pairs; reg=ex keeps exps for a store
 * that writes them; replicas and grid splits where the kind has them. */
static bool rows_check_kernel(const tuned__config *c, const tuned__kind_spec *k, char *why,
                              size_t n)
{
    if (c->reg == TUNED__REG_EX && !k->keeps_exps)
        return tuned__config_refuse(why, n, "reg=ex keeps exps for softmax's store; %s has none",
                                    k->name);
    if (!k->pairs && c->red != TUNED__RED_SPLIT)
        return tuned__config_refuse(why, n, "%s reduces one sum: no red=fused", k->name);
    if (!k->replicas && c->replicas > 1)
        return tuned__config_refuse(why, n, "%s has no replicas (forward kernels only)", k->name);
    if (c->grid > 1 && k->path[TUNED__PATH_GRID].entry == NULL)
        return tuned__config_refuse(why, n, "%s has no grid split", k->name);
    if (c->sel != TUNED__SEL_SCAN && !k->selects)
        return tuned__config_refuse(why, n, "%s chooses no top k: no sel=%s", k->name,
                                    sel_names[c->sel]);
    unsigned row_threads = tuned__config_threads_per_row(c) * tuned__config_blocks_per_row(c);
    /* sel=rank has its own bound (rows_check_sel) */
    if (k->max_row_threads > 0 && row_threads > k->max_row_threads &&
        c->sel != TUNED__SEL_RANK)
        return tuned__config_refuse(why, n, "%s keeps a row in at most %u threads (%u here)",
                                    k->name, (unsigned)k->max_row_threads, row_threads);
    if (k->fixed_store_hint && c->st != TUNED__ST_DEF)
        return tuned__config_refuse(why, n, "%s writes too little for a store hint: st=def",
                                    k->name);
    if (k->fixed_registers && c->reg != TUNED__REG_F32)
        return tuned__config_refuse(why, n, "%s holds its row in fp32: reg=f32", k->name);
    if (k->pairs && c->grid > 1 && c->red != TUNED__RED_FUSED)
        return tuned__config_refuse(why, n, "a row split over the grid reduces one-round pairs");
    /* In place, a load through the read-only cache may see a stale line of
     * what the kernel itself writes. */
    if (c->ld == TUNED__LD_NC && tuned__kind_in_place(k))
        return tuned__config_refuse(why, n, "%s may run in place: no ld=nc", k->name);
    return true;
}

/* terms=lanes: a kind that renormalises (its terms_param), a key that
 * does, and several threads a row (one thread sums its own terms: the
 * same kernel either way). */
static bool rows_check_terms(const tuned__config *c, const tuned__kind_spec *k,
                             const tuned__shape *s, char *why, size_t n)
{
    if (c->terms == TUNED__TERMS_ROUNDS)
        return true;
    if (k->terms_param == 0)
        return tuned__config_refuse(why, n, "%s renormalises no weights: no terms=%s", k->name,
                                    terms_names[c->terms]);
    if (tuned__params_get(k, s->params, k->terms_param - 1u) == 0)
        return tuned__config_refuse(why, n, "a key without %s has no terms: no terms=%s",
                                    k->param[k->terms_param - 1].name, terms_names[c->terms]);
    if (tuned__config_threads_per_row(c) * tuned__config_blocks_per_row(c) < 2)
        return tuned__config_refuse(why, n, "one thread a row sums its own terms: no terms=%s",
                                    terms_names[c->terms]);
    return true;
}

/* The bytes of router_rank.cu's RankRow for e experts, k outputs, groups
 * and threads a row (its fields' sizes, each array's own, plus 8 of
 * padding): the segments' maxima, the candidates' entries and logits, the
 * warps' parts, the count, the outputs, and with groups the keys, the
 * groups' scores and their kept flags. */
static uint64_t rank_row_bytes(uint64_t e, unsigned k, unsigned groups, unsigned kept,
                               unsigned threads)
{
    unsigned warps = threads / 32u, k2 = 1;
    unsigned need = (k * groups + kept - 1) / (kept > 0 ? kept : 1);
    while (k2 < need)
        k2 *= 2;
    unsigned segments = warps > k2 ? warps : k2;
    if (segments > threads)
        segments = threads;
    uint64_t bytes = 8ull * segments + 12ull * e + 8ull * warps + 4u + 8ull * k + 8u;
    if (groups > 1)
        bytes += 4ull * e + 8ull * groups;
    return bytes;
}

/* sel=merge keeps k entries a thread (its kind's key parameter "k");
 * sel=rank keeps a row over 32 to TUNED__SEL_RANK_MAX_THREADS threads (no
 * more than the row's experts rounded up to a power of two, or a warp;
 * no fewer than k), one element a pass, its terms in one form, and its
 * rows' RankRows in shared memory (rows_check_kernel holds every other
 * selection to the kind's threads a row). */
static bool rows_check_sel(const tuned__config *c, const tuned__kind_spec *k,
                           const tuned__shape *s, char *why, size_t n)
{
    unsigned topk = tuned__params_value(k, s->params, "k", 0);
    if (c->sel == TUNED__SEL_MERGE && topk > TUNED__SEL_MERGE_MAX_K)
        return tuned__config_refuse(why, n, "sel=merge keeps k entries a thread: k %u is over %u",
                                    topk, TUNED__SEL_MERGE_MAX_K);
    if (c->sel != TUNED__SEL_RANK)
        return true;
    unsigned threads = tuned__config_threads_per_row(c);
    uint64_t wide = 32;
    while (wide < s->cols)
        wide *= 2;
    if (threads < 32 || threads > TUNED__SEL_RANK_MAX_THREADS || threads > wide)
        return tuned__config_refuse(why, n,
                                    "sel=rank keeps a row in 32 to %u threads, at most %llu for "
                                    "%llu experts (%u here)",
                                    TUNED__SEL_RANK_MAX_THREADS, (unsigned long long)wide,
                                    (unsigned long long)s->cols, threads);
    /* fewer segments than k bound nothing: every element a candidate */
    if (threads < topk)
        return tuned__config_refuse(why, n, "sel=rank needs k threads a row or more (k %u, %u "
                                            "here)", topk, threads);
    if (tuned__config_blocks_per_row(c) != 1)
        return tuned__config_refuse(why, n, "sel=rank keeps a row in one block: no cluster, "
                                            "grid or replicas");
    if (c->vec != 1)
        return tuned__config_refuse(why, n, "sel=rank loads one element a pass: v1");
    if (c->terms != TUNED__TERMS_ROUNDS)
        return tuned__config_refuse(why, n, "sel=rank sums its terms one way: no terms=%s",
                                    terms_names[c->terms]);
    unsigned groups = tuned__params_value(k, s->params, "groups", 1);
    unsigned kept = tuned__params_value(k, s->params, "topk_group", 1);
    uint64_t bytes = (uint64_t)c->rows * rank_row_bytes(s->cols, topk, groups, kept, threads);
    if (bytes > TUNED__SEL_RANK_MAX_SHARED)
        return tuned__config_refuse(why, n,
                                    "sel=rank holds %u rows of %llu experts in %llu bytes of "
                                    "shared memory (at most %u)",
                                    (unsigned)c->rows, (unsigned long long)s->cols,
                                    (unsigned long long)bytes, TUNED__SEL_RANK_MAX_SHARED);
    return true;
}

/* A stash (passes 1 .. stash of each thread in shared memory) as
 * softmax_rows_common.cu's T_STASH takes it: a forward kernel, vectors
 * that cp.async copies (4 bytes or more), every stashed pass whole inside
 * the row wherever it starts, and the block's stash within
 * TUNED__STASH_MAX_BYTES. */
static bool stash_check(const tuned__config *c, const tuned__shape *s, char *why, size_t n)
{
    size_t esize = tuned_dtype_size(s->dtype);
    if (!tuned__shape_spec(s)->stash)
        return tuned__config_refuse(why, n, "%s keeps no stash", tuned__shape_spec(s)->name);
    if (c->vec * esize < 4)
        return tuned__config_refuse(why, n, "a stash needs vectors of 4 bytes or more");
    uint64_t span = pass_span(c);
    if ((c->stash + 1ull) * span > s->cols || span < tuned__config_head_align(c, s))
        return tuned__config_refuse(why, n,
                                    "%u stashed passes of %llu columns do not lie inside rows "
                                    "of %llu",
                                    c->stash, (unsigned long long)span,
                                    (unsigned long long)s->cols);
    uint64_t bytes = (uint64_t)c->stash * c->warps * 32u * c->vec * esize;
    if (bytes > TUNED__STASH_MAX_BYTES)
        return tuned__config_refuse(why, n, "a stash of %llu bytes a block (at most %u)",
                                    (unsigned long long)bytes, TUNED__STASH_MAX_BYTES);
    return true;
}

/* What a register-row config needs of its shape and GPU. */
static bool rows_check_shape(const tuned__config *c, const tuned__shape *s, int sms, char *why,
                             size_t n)
{
    size_t esize = tuned_dtype_size(s->dtype);
    const tuned__kind_spec *kind = tuned__shape_spec(s);
    if (!rows_check_kernel(c, kind, why, n) || !rows_check_terms(c, kind, s, why, n) ||
        !rows_check_sel(c, kind, s, why, n))
        return false;
    /* An L2 evict_last load gains a kernel that reads each element once
     * nothing and keeps the input in L2 afterwards, past an L2 flush too
     * (measured on the H200: 4-25% faster repeats), which skewed every
     * timing after it: the templates no longer emit it. The text form
     * still parses, so old records that name it load. */
    if (c->ld == TUNED__LD_EL)
        return tuned__config_refuse(why, n, "ld=el (L2 evict_last) is no longer generated");
    if (c->vec * esize > 16)
        return tuned__config_refuse(why, n, "a vector of %u %s elements exceeds 16 bytes", c->vec,
                                    tuned_dtype_name(s->dtype));
    if (c->reg == TUNED__REG_EX && (esize != 2 || c->vec * esize < 4))
        return tuned__config_refuse(why, n, "reg=ex needs a 16-bit dtype and vectors of 4+ bytes");
    if (c->stash > 0 && !stash_check(c, s, why, n))
        return false;
    if (c->grid > 1) {
        /* A cooperative launch: every block resident at once (launch
         * bounds leave room for minb blocks on each SM), and one
         * workspace pair each. */
        uint64_t blocks = s->rows * c->grid;
        if (blocks > TUNED__GRID_MAX_BLOCKS || (sms > 0 && blocks > (uint64_t)sms * c->minb))
            return tuned__config_refuse(why, n,
                                        "%llu blocks of a grid split do not fit %d SMs at %u a SM",
                                        (unsigned long long)blocks, sms, c->minb);
    }
    uint64_t blocks = (s->rows + c->rows - 1) / c->rows * tuned__config_launch_blocks_per_row(c);
    if (blocks > 2147483647ull)
        return tuned__config_refuse(why, n, "%llu blocks exceed a grid",
                                    (unsigned long long)blocks);
    uint64_t worst = tuned__config_iters(c, s, false);
    if (worst > MAX_ITERS)
        return tuned__config_refuse(why, n, "%llu vector accesses per thread (at most %d)",
                                    (unsigned long long)worst, MAX_ITERS);
    /* The budget of rows on a vector boundary: a call with unaligned rows
     * may hold one vector more, which ptxas spills, never refuses. */
    bool head_free = tuned__config_head_free(c, s->cols);
    unsigned threads = c->warps * 32u;
    unsigned budget = REGISTERS_PER_SM / (threads * c->minb);
    if (budget > MAX_REGISTERS_PER_THREAD)
        budget = MAX_REGISTERS_PER_THREAD;
    if (kind->max_thread_elems > 0) {
        uint64_t pass = (uint64_t)tuned__config_threads_per_row(c) * c->vec;
        uint64_t elems = (s->cols + pass - 1) / pass * c->vec;
        if (elems > kind->max_thread_elems)
            return tuned__config_refuse(why, n, "%s holds at most %u elements a thread (%llu here)",
                                        kind->name, (unsigned)kind->max_thread_elems,
                                        (unsigned long long)elems);
    }
    /* A backward kernel holds two rows, y and dy. */
    uint64_t held = kind->rows_held;
    uint64_t need = held * tuned__config_row_registers(c, s, head_free) +
                    REGISTER_OVERHEAD;
    if (need > budget)
        return tuned__config_refuse(why, n,
                                    "needs about %llu registers per thread, %u threads allow %u",
                                    (unsigned long long)need, threads, budget);
    return true;
}

/* A chunk: rows a chunk, 1 up to the shape's rows, of a kind evaluated in
 * chunks, and its vocabulary blocks (none, or 2 or more: one block is
 * the whole row, written without ".v1" so that one chunk has one text);
 * nothing else set. */
static bool chunk_check(const tuned__config *c, const tuned__shape *s, const tuned__kind_spec *k,
                        char *why, size_t n)
{
    tuned__config bare = {.family = TUNED__FAMILY_CHUNK, .chunk = c->chunk, .splits = c->splits};
    if (!tuned__config_equal(c, &bare))
        return tuned__config_refuse(why, n, "a chunk config has no kernel fields");
    if (c->chunk < 1 || c->chunk > TUNED__MAX_CHUNK)
        return tuned__config_refuse(why, n, "chunk of %u rows (1 to %u)", (unsigned)c->chunk,
                                    TUNED__MAX_CHUNK);
    if (c->splits == 1 || c->splits > TUNED__MAX_SPLITS)
        return tuned__config_refuse(why, n, "%u vocabulary blocks (2 to %u; whole rows: no .v)",
                                    (unsigned)c->splits, TUNED__MAX_SPLITS);
    if (k != NULL && !tuned__kind_chunked(k))
        return tuned__config_refuse(why, n, "%s has kernel configs, not chunks", k->name);
    if (s != NULL && c->chunk > s->rows)
        return tuned__config_refuse(why, n, "a chunk of %u rows is more than the %llu rows",
                                    (unsigned)c->chunk, (unsigned long long)s->rows);
    return true;
}

bool tuned__shape_check(const tuned__shape *s, char *why, size_t n)
{
    if (tuned_dtype_size(s->dtype) == 0)
        return tuned__config_refuse(why, n, "unknown dtype %d", (int)s->dtype);
    if (tuned__shape_spec(s) == NULL)
        return tuned__config_refuse(why, n, "unknown kernel %u", (unsigned)s->kernel);
    if (s->rows < 1 || s->rows > TUNED__MAX_ROWS || s->cols < 1 || s->cols > TUNED__MAX_COLS)
        return tuned__config_refuse(why, n, "shape %llux%llu out of range",
                                    (unsigned long long)s->rows, (unsigned long long)s->cols);
    return tuned__params_check(tuned__shape_spec(s), s->cols, s->params, why, n);
}

bool tuned__config_check(const tuned__config *c, const tuned__shape *s, int arch, int sms,
                         char *why, size_t n)
{
    if (s != NULL && !tuned__shape_check(s, why, n))
        return false;
    if (arch > 0 && arch < TUNED__MIN_ARCH)
        return tuned__config_refuse(why, n, "tuned's kernels need sm_%d or newer (this GPU is "
                                    "sm_%d)", TUNED__MIN_ARCH, arch);
    /* A kind evaluated as a composite takes chunk configs and only them. */
    const tuned__kind_spec *k = s != NULL ? tuned__shape_spec(s) : NULL;
    if (c->family == TUNED__FAMILY_CHUNK)
        return chunk_check(c, s, k, why, n);
    if (k != NULL && k->evaluate != TUNED__EVALUATE_KERNEL)
        return tuned__config_refuse(why, n, "%s is tuned by its chunk (chunkN), not a kernel "
                                    "config", k->name);
    if (c->family == TUNED__FAMILY_TMA)
        return tma_check(c, s, arch, why, n);
    if (c->family != TUNED__FAMILY_ROWS)
        return tuned__config_refuse(why, n, "unknown family %u", c->family);
    return rows_check_fields(c, arch, why, n) &&
           (s == NULL || rows_check_shape(c, s, sms, why, n));
}
