/* source.c: fills a template with a config's constants.
 *
 * The generated text is a block of #defines followed by the template,
 * so a variant's source is exactly what NVRTC compiles and what the
 * compile cache hashes. Codegen refuses what tuned__config_check refuses
 * (src/codegen/config.c); whether a config is a good idea for a shape is
 * the tuner's space's question. */
#include "src/codegen/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/hash.h"
#include "src/codegen/templates.h"

const tuned__template *tuned__template_find(const char *name)
{
    for (size_t i = 0; i < tuned__template_count; i++)
        if (strcmp(tuned__templates[i].name, name) == 0)
            return &tuned__templates[i];
    return NULL;
}

uint64_t tuned__templates_hash(void)
{
    uint64_t h = TUNED__FNV_SEED;
    for (size_t i = 0; i < tuned__template_count; i++)
        h = tuned__fnv1a64(tuned__templates[i].text, tuned__templates[i].size, h);
    unsigned version = TUNED__CODEGEN_VERSION;
    return tuned__fnv1a64(&version, sizeof version, h);
}

bool tuned__source_head_free(const tuned__config *c, const tuned__shape *s,
                             const tuned__codegen_opts *opts)
{
    return !(opts != NULL && opts->unaligned) && tuned__config_head_free(c, s->cols);
}

const char *tuned__source_entry(const tuned__config *c)
{
    return c->family == TUNED__FAMILY_TMA ? "tuned_softmax_staged" : "tuned_softmax_rows";
}

size_t tuned__source_stage_bytes(const tuned__config *c, const tuned__shape *s)
{
    uint64_t units = s->cols * tuned_dtype_size(s->dtype) / 16;
    uint64_t per_block = (units + c->cluster - 1) / c->cluster;
    return (size_t)((per_block * 16 + 127) / 128 * 128);
}

size_t tuned__source_dynamic_smem(const tuned__config *c, const tuned__shape *s)
{
    return c->family == TUNED__FAMILY_TMA ? c->stages * tuned__source_stage_bytes(c, s) : 0;
}

static int join_source(const char *defines, const char *prelude, const char *template_name,
                       char **out, tuned__err *e);

/* What both softmax families are built on (kernels/templates/). */
#define COMMON_TEMPLATE "softmax_common"

/* The staged (TMA) family's source. */
static int staged_source(const tuned__config *c, const tuned__shape *s, const char *name,
                         char **out, tuned__err *e)
{
    if (c->warps < 1 || c->warps > 32 || (c->warps & (c->warps - 1)) != 0 || c->cluster < 1 ||
        c->cluster > 16 || (c->cluster & (c->cluster - 1)) != 0 || c->stages < 1 || c->grid != 0 ||
        c->stages > 4 || c->st >= TUNED__ST_COUNT)
        return tuned__errf(e, TUNED_EINVAL, "codegen: softmax %s: bad warps, cluster or stages",
                           name);
    size_t smem = tuned__source_dynamic_smem(c, s);
    if (smem > TUNED__MAX_DYNAMIC_SMEM)
        return tuned__errf(e, TUNED_EINVAL,
                           "codegen: softmax %s: %zu bytes of stages exceed shared memory", name,
                           smem);
    char defines[512];
    snprintf(defines, sizeof defines,
             "// tuned softmax variant %s for %s x %llu columns\n"
             "#define T_DTYPE %d\n#define T_WARPS %u\n#define T_CLUSTER %u\n#define T_STAGES %u\n"
             "#define T_STAGE_BYTES %zu\n#define T_ST %u\n",
             name, tuned_dtype_name(s->dtype), (unsigned long long)s->cols, (int)s->dtype,
             c->warps, c->cluster, c->stages, tuned__source_stage_bytes(c, s), c->st);
    return join_source(defines, COMMON_TEMPLATE, "softmax_staged", out, e);
}

/* Concatenates a defines block, the template called prelude (NULL: none)
 * and the template called template_name into a malloc'd string. */
static int join_source(const char *defines, const char *prelude, const char *template_name,
                       char **out, tuned__err *e)
{
    const tuned__template *p = prelude != NULL ? tuned__template_find(prelude) : NULL;
    const tuned__template *t = tuned__template_find(template_name);
    if (t == NULL || (prelude != NULL && p == NULL))
        return tuned__errf(e, TUNED_EINVAL, "codegen: no template '%s' in this build",
                           t == NULL ? template_name : prelude);
    size_t dlen = strlen(defines), plen = p != NULL ? p->size : 0;
    char *src = malloc(dlen + plen + t->size + 1);
    if (src == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "codegen: out of memory for %s source",
                           template_name);
    memcpy(src, defines, dlen);
    if (p != NULL)
        memcpy(src + dlen, p->text, plen);
    memcpy(src + dlen + plen, t->text, t->size + 1);
    *out = src;
    return 0;
}

int tuned__source_softmax(const tuned__config *c, const tuned__shape *s,
                          const tuned__codegen_opts *opts, char **out, tuned__err *e)
{
    char name[TUNED__CONFIG_TEXT];
    tuned__config_format(c, name, sizeof name);
    /* Any architecture and SM count: the source text is the same for all;
     * compiling and launching it answer for the GPU. */
    char why[160];
    if (!tuned__config_check(c, s, 0, 0, why, sizeof why))
        return tuned__errf(e, TUNED_EINVAL, "codegen: softmax %s: %s", name, why);
    if (c->family == TUNED__FAMILY_TMA) {
        if (opts != NULL && opts->plant_bug != 0)
            return tuned__errf(e, TUNED_EINVAL,
                               "codegen: softmax %s: planted bugs exist in the rows family only",
                               name);
        /* Staged rows handle any alignment at run time: opts->unaligned
         * needs no other code. */
        return staged_source(c, s, name, out, e);
    }
    bool head_free = tuned__source_head_free(c, s, opts);
    uint64_t iters = tuned__config_iters(c, s->cols, head_free);
    int plant = opts != NULL ? opts->plant_bug : 0;
    char defines[640];
    snprintf(defines, sizeof defines,
             "// tuned softmax variant %s for %s x %llu columns\n"
             "#define T_DTYPE %d\n#define T_WARPS %u\n#define T_ROWS %u\n#define T_CLUSTER %u\n"
             "#define T_GRID %u\n#define T_GRID_SLOTS %d\n"
             "#define T_MIN_BLOCKS %u\n#define T_VEC %u\n#define T_ITERS %llu\n#define T_COLS %llu\n"
             "#define T_HEAD_FREE %d\n#define T_LD %u\n"
             "#define T_ST %u\n#define T_REG_PACKED %d\n#define T_EXP16 %d\n#define T_FUSED %d\n"
             "#define T_PLANT_BUG %d\n",
             name, tuned_dtype_name(s->dtype), (unsigned long long)s->cols, (int)s->dtype,
             c->warps, c->rows, c->cluster, c->grid > 1 ? c->grid : 1u, TUNED__GRID_SLOTS, c->minb,
             c->vec, (unsigned long long)iters, (unsigned long long)s->cols, head_free, c->ld,
             c->st, c->reg != TUNED__REG_F32, c->reg == TUNED__REG_EX, c->red == TUNED__RED_FUSED,
             plant);
    return join_source(defines, COMMON_TEMPLATE, "softmax_rows", out, e);
}

int tuned__source_reference(tuned_dtype dtype, char **out, tuned__err *e)
{
    if (tuned_dtype_size(dtype) == 0)
        return tuned__errf(e, TUNED_EINVAL, "codegen: reference: unknown dtype %d", (int)dtype);
    char defines[128];
    snprintf(defines, sizeof defines, "// tuned reference kernels for %s\n#define T_DTYPE %d\n",
             tuned_dtype_name(dtype), (int)dtype);
    return join_source(defines, NULL, "reference", out, e);
}
