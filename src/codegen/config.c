/* config.c: the text form of a kernel config and the per-row arithmetic
 * (vectors per thread, registers held) that codegen and the space share. */
#include "src/codegen/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ld_names[TUNED__LD_COUNT] = {"def", "nc", "cs", "el"};
static const char *const st_names[TUNED__ST_COUNT] = {"def", "cs"};
static const char *const reg_names[TUNED__REG_COUNT] = {"f32", "pk", "ex"};
static const char *const red_names[TUNED__RED_COUNT] = {"split", "fused"};

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
    if (c->family == TUNED__FAMILY_TMA) {
        snprintf(buf, n, "tma.w%u.c%u.s%u.st=%s", c->warps, c->cluster, c->stages,
                 tuned__st_name(c->st));
        return;
    }
    /* The two-round reduction predates the field: leaving it out keeps
     * the text of every stored record and recorded landscape. */
    char grid[16] = "";
    if (c->grid > 1)
        snprintf(grid, sizeof grid, ".g%u", c->grid);
    snprintf(buf, n, "w%u.r%u.c%u.m%u.v%u.ld=%s.st=%s.reg=%s%s%s%s", c->warps, c->rows,
             c->cluster, c->minb, c->vec, tuned__ld_name(c->ld), tuned__st_name(c->st),
             tuned__reg_name(c->reg), c->red != TUNED__RED_SPLIT ? ".red=" : "",
             c->red != TUNED__RED_SPLIT ? tuned__red_name(c->red) : "", grid);
}

static bool is_pow2_upto(unsigned long v, unsigned long max)
{
    return v >= 1 && v <= max && (v & (v - 1)) == 0;
}

/* Parses "<letter><number>" with the number in 1..max, a power of two
 * unless any is set. */
static int parse_number(const char *field, char letter, unsigned long max, bool any,
                        unsigned *out, const char *text, tuned__err *e)
{
    if (field[0] != letter || field[1] < '0' || field[1] > '9')
        return tuned__errf(e, TUNED_EINVAL, "config '%s': expected '%c<number>' at '%s'", text,
                           letter, field);
    char *end;
    errno = 0;
    unsigned long v = strtoul(field + 1, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > max || (!any && !is_pow2_upto(v, max)))
        return tuned__errf(e, TUNED_EINVAL, "config '%s': '%s' must be %s from 1 to %lu", text,
                           field, any ? "a number" : "a power of two", max);
    *out = (unsigned)v;
    return 0;
}

static int parse_num_field(const char *field, char letter, unsigned long max, unsigned *out,
                           const char *text, tuned__err *e)
{
    return parse_number(field, letter, max, false, out, text, e);
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

/* "tma.w16.c2.s3.st=cs" */
static int parse_tma(const char *text, char *rest, tuned__config *out, tuned__err *e)
{
    char *fields[5];
    size_t nf = 0;
    char *save = NULL;
    for (char *f = strtok_r(rest, ".", &save); f != NULL; f = strtok_r(NULL, ".", &save)) {
        if (nf == 4)
            return tuned__errf(e, TUNED_EINVAL, "config '%s': too many fields", text);
        fields[nf++] = f;
    }
    if (nf != 4)
        return tuned__errf(e, TUNED_EINVAL,
                           "config '%s': expected 4 fields after tma., like tma.w16.c2.s3.st=cs",
                           text);
    tuned__config c = {.family = TUNED__FAMILY_TMA, .rows = 1, .minb = 1, .vec = 0};
    unsigned warps, cluster, stages;
    int rc;
    if ((rc = parse_num_field(fields[0], 'w', 32, &warps, text, e)) != 0 ||
        (rc = parse_num_field(fields[1], 'c', 16, &cluster, text, e)) != 0 ||
        (rc = parse_number(fields[2], 's', 4, true, &stages, text, e)) != 0 ||
        (rc = parse_named_field(fields[3], "st=", st_names, TUNED__ST_COUNT, &c.st, text, e)) != 0)
        return rc;
    c.warps = (uint8_t)warps;
    c.cluster = (uint8_t)cluster;
    c.stages = (uint8_t)stages;
    *out = c;
    return 0;
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
    char *fields[10];
    size_t nf = 0;
    char *save = NULL;
    for (char *f = strtok_r(copy, ".", &save); f != NULL; f = strtok_r(NULL, ".", &save)) {
        if (nf == 10)
            return tuned__errf(e, TUNED_EINVAL, "config '%s': too many fields", text);
        fields[nf++] = f;
    }
    if (nf < 8)
        return tuned__errf(e, TUNED_EINVAL,
                           "config '%s': expected 8 fields like w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32 "
                           "(and optionally .red=fused, then .g<blocks>)",
                           text);
    tuned__config c = {.family = TUNED__FAMILY_ROWS};
    unsigned warps, rows, cluster, minb, vec;
    int rc;
    if ((rc = parse_num_field(fields[0], 'w', 32, &warps, text, e)) != 0 ||
        (rc = parse_num_field(fields[1], 'r', 1024, &rows, text, e)) != 0 ||
        (rc = parse_num_field(fields[2], 'c', 16, &cluster, text, e)) != 0 ||
        (rc = parse_num_field(fields[3], 'm', 4, &minb, text, e)) != 0 ||
        (rc = parse_num_field(fields[4], 'v', 8, &vec, text, e)) != 0 ||
        (rc = parse_named_field(fields[5], "ld=", ld_names, TUNED__LD_COUNT, &c.ld, text, e)) != 0 ||
        (rc = parse_named_field(fields[6], "st=", st_names, TUNED__ST_COUNT, &c.st, text, e)) != 0 ||
        (rc = parse_named_field(fields[7], "reg=", reg_names, TUNED__REG_COUNT, &c.reg, text, e)) != 0 ||
        (nf >= 9 && (rc = parse_named_field(fields[8], "red=", red_names, TUNED__RED_COUNT, &c.red,
                                            text, e)) != 0))
        return rc;
    if (nf == 10) {
        unsigned grid;
        if ((rc = parse_num_field(fields[9], 'g', TUNED__GRID_MAX, &grid, text, e)) != 0)
            return rc;
        if (grid < 2)
            return tuned__errf(e, TUNED_EINVAL, "config '%s': a grid split is 2 to %d blocks",
                               text, TUNED__GRID_MAX);
        if (c.red != TUNED__RED_FUSED || cluster != 1 || rows != 1)
            return tuned__errf(e, TUNED_EINVAL,
                               "config '%s': a row split over the grid takes whole blocks (r1), "
                               "no cluster (c1) and the one-round reduction (red=fused)",
                               text);
        c.grid = (uint16_t)grid;
    }
    c.warps = (uint8_t)warps;
    c.rows = (uint16_t)rows;
    c.cluster = (uint8_t)cluster;
    c.minb = (uint8_t)minb;
    c.vec = (uint8_t)vec;
    if (c.rows > 32u * c.warps)
        return tuned__errf(e, TUNED_EINVAL,
                           "config '%s': rows per block (%u) exceed the block's threads (%u)",
                           text, c.rows, 32u * c.warps);
    if (32u * c.warps * c.minb > 2048)
        return tuned__errf(e, TUNED_EINVAL,
                           "config '%s': %u blocks of %u threads do not fit a multiprocessor",
                           text, c.minb, 32u * c.warps);
    if (c.cluster > 1 && c.rows != 1)
        return tuned__errf(e, TUNED_EINVAL,
                           "config '%s': a row split over a cluster takes the whole block (r1)",
                           text);
    *out = c;
    return 0;
}

bool tuned__config_equal(const tuned__config *a, const tuned__config *b)
{
    return a->family == b->family && a->warps == b->warps && a->rows == b->rows &&
           a->cluster == b->cluster && a->minb == b->minb && a->vec == b->vec && a->ld == b->ld && a->st == b->st &&
           a->reg == b->reg && a->red == b->red && a->stages == b->stages && a->grid == b->grid;
}

uint64_t tuned__config_iters(const tuned__config *c, uint64_t cols, bool head_free)
{
    if (c->family != TUNED__FAMILY_ROWS || c->vec == 0)
        return 0;
    uint64_t span = (uint64_t)tuned__config_threads_per_row(c) * tuned__config_blocks_per_row(c) *
                    c->vec;
    /* A row starting at element offset `head` inside its first vector
     * covers cols + head <= cols + vec - 1 vector slots. */
    uint64_t slots = head_free ? cols : cols + c->vec - 1;
    return (slots + span - 1) / span;
}

uint64_t tuned__config_row_registers(const tuned__config *c, tuned_dtype dtype, uint64_t cols,
                                     bool head_free)
{
    uint64_t elems = tuned__config_iters(c, cols, head_free) * c->vec;
    if (c->reg == TUNED__REG_PK || c->reg == TUNED__REG_EX) {
        uint64_t bytes = elems * tuned_dtype_size(dtype);
        return (bytes + 3) / 4;
    }
    return elems;
}
