/* source.c: fills a template with a config's constants.
 *
 * The generated text is a block of #defines followed by the templates a
 * kernel is made of (softmax_common.cu, then for the rows family
 * softmax_rows_common.cu, then the kernel's own: softmax_rows.cu,
 * softmax_grid.cu for a row split over the grid, softmax_bwd.cu for the
 * backward kernels, or softmax_staged.cu; log_softmax is softmax's
 * templates with T_LOG, log_softmax_bwd softmax_bwd.cu's), so
 * a variant's source is exactly what NVRTC compiles and what the compile
 * cache hashes. Codegen refuses what tuned__config_check refuses
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

bool tuned__source_head_free(const tuned__config *c, const tuned__shape *s,
                             const tuned__codegen_opts *opts)
{
    return !(opts != NULL && opts->unaligned) && tuned__config_head_free(c, s->cols);
}

unsigned tuned__source_path(const tuned__config *c)
{
    if (c->family == TUNED__FAMILY_TMA)
        return TUNED__PATH_STAGED;
    return c->grid > 1 ? TUNED__PATH_GRID : TUNED__PATH_ROWS;
}

const char *tuned__source_entry(const tuned__config *c, const tuned__shape *s)
{
    const tuned__kind_spec *k = tuned__shape_spec(s);
    return k != NULL ? k->path[tuned__source_path(c)].entry : NULL;
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

static int join_source(const char *defines, const char *const *names, size_t max, char **out,
                       tuned__err *e);

/* The staged (TMA) family's source. */
static int staged_source(const tuned__config *c, const tuned__shape *s, const char *name,
                         char **out, tuned__err *e)
{
    /* tuned__config_check has vetted every field and the stages' size. */
    char defines[512];
    const tuned__kind_spec *k = tuned__shape_spec(s);
    snprintf(defines, sizeof defines,
             "// tuned %s variant %s for %s x %llu columns\n"
             "#define T_DTYPE %d\n#define T_WARPS %u\n#define T_CLUSTER %u\n#define T_STAGES %u\n"
             "#define T_STAGE_BYTES %zu\n#define T_ST %u\n#define T_LOG %d\n",
             k->name, name, tuned_dtype_name(s->dtype),
             (unsigned long long)s->cols, (int)s->dtype, c->warps, c->cluster, c->stages,
             tuned__source_stage_bytes(c, s), c->st, k->define_log);
    return join_source(defines, k->path[TUNED__PATH_STAGED].parts, TUNED__KIND_MAX_PARTS, out, e);
}

/* Concatenates a defines block and the templates called names (a list of
 * at most max, NULL-terminated when shorter; kernels/templates/ without
 * ".cu", in order) into a malloc'd string. */
static int join_source(const char *defines, const char *const *names, size_t max, char **out,
                       tuned__err *e)
{
    size_t size = strlen(defines);
    for (size_t i = 0; i < max && names[i] != NULL; i++) {
        const tuned__template *t = tuned__template_find(names[i]);
        if (t == NULL)
            return tuned__errf(e, TUNED_EINVAL, "codegen: no template '%s' in this build",
                               names[i]);
        size += t->size;
    }
    char *src = malloc(size + 1);
    if (src == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "codegen: out of memory for a %zu-byte source",
                           size);
    size_t at = strlen(defines);
    memcpy(src, defines, at);
    for (size_t i = 0; i < max && names[i] != NULL; i++) {
        const tuned__template *t = tuned__template_find(names[i]);
        memcpy(src + at, t->text, t->size);
        at += t->size;
    }
    src[at] = '\0';
    *out = src;
    return 0;
}

/* Appends the kind's own defines and the flags opts asks for to the
 * defines block (nothing for a kind without them: its text stays). */
static int kind_defines(const tuned__kind_spec *k, const tuned__codegen_opts *opts, char *buf,
                        size_t n, tuned__err *e)
{
    unsigned flags = opts != NULL ? opts->flags : 0;
    size_t at = strlen(buf);
    if (k->defines != NULL)
        at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "%s", k->defines);
    for (unsigned i = 0; i < TUNED__KIND_MAX_FLAGS; i++) {
        if (!(flags & (1u << i)))
            continue;
        if (k->flag[i] == NULL)
            return tuned__errf(e, TUNED_EINVAL, "codegen: %s has no option %u", k->name, i);
        at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "#define %s 1\n", k->flag[i]);
    }
    if (flags >> TUNED__KIND_MAX_FLAGS != 0)
        return tuned__errf(e, TUNED_EINVAL, "codegen: %s: options 0x%x", k->name, flags);
    if (at >= n)
        return tuned__errf(e, TUNED_EINVAL, "codegen: %s: the defines overflow", k->name);
    return 0;
}

/* The T_PLANT_BUG define for opts: empty without a planted bug. Planted
 * bugs prove the checker catches a wrong kernel; they are a test hook, so
 * only a build with TUNED_TEST_HOOKS emits them. */
static int plant_define(const tuned__codegen_opts *opts, const char *name, char *out, size_t n,
                        tuned__err *e)
{
    int plant = opts != NULL ? opts->plant_bug : 0;
    out[0] = '\0';
    if (plant == 0)
        return 0;
#ifdef TUNED_TEST_HOOKS
    if (plant < 0 || plant > 2)
        return tuned__errf(e, TUNED_EINVAL, "codegen: softmax %s: no planted bug %d", name,
                           plant);
    snprintf(out, n, "#define T_PLANT_BUG %d\n", plant);
    return 0;
#else
    (void)n;
    return tuned__errf(e, TUNED_EUNSUPPORTED,
                       "codegen: softmax %s: planted bugs are a test hook, not in this build "
                       "(configure with -Dtest_hooks=true)",
                       name);
#endif
}

int tuned__source_kernel(const tuned__config *c, const tuned__shape *s,
                          const tuned__codegen_opts *opts, char **out, tuned__err *e)
{
    char name[TUNED__CONFIG_TEXT];
    tuned__config_format(c, name, sizeof name);
    /* Any architecture and SM count: the source text is the same for all;
     * compiling and launching it answer for the GPU. */
    char why[160];
    const tuned__kind_spec *k = tuned__shape_spec(s);
    if (!tuned__config_check(c, s, 0, 0, why, sizeof why))
        return tuned__errf(e, TUNED_EINVAL, "codegen: %s %s: %s", k != NULL ? k->name : "?",
                           name, why);
    if (c->family == TUNED__FAMILY_CHUNK)
        return tuned__errf(e, TUNED_EINVAL,
                           "codegen: %s %s: a chunk has no kernel of its own (its evaluation "
                           "runs the %s kind's kernel inside GEMMs)",
                           k->name, name, k->inner != 0 ? tuned__kernel_name(k->inner) : "?");
    if (c->family == TUNED__FAMILY_TMA) {
        if (opts != NULL && opts->plant_bug != 0)
            return tuned__errf(e, TUNED_EINVAL,
                               "codegen: softmax %s: planted bugs exist in the rows family only",
                               name);
        /* Staged rows handle any alignment at run time: opts->unaligned
         * needs no other code. */
        return staged_source(c, s, name, out, e);
    }
    /* A compiled-in option whose registers the tuned bound would spill
     * (ptxas: cross-entropy's softcap 630 bytes, argmax 352, at w8.c8.m4
     * bf16 x 128256; none at m2) relaxes it (the spec's flag_min_blocks). */
    unsigned minb = c->minb;
    for (unsigned i = 0; i < TUNED__KIND_MAX_FLAGS; i++)
        if (opts != NULL && (opts->flags & (1u << i)) && k->flag_min_blocks[i] != 0 &&
            minb > k->flag_min_blocks[i])
            minb = k->flag_min_blocks[i];
    bool head_free = tuned__source_head_free(c, s, opts);
    uint64_t iters = tuned__config_iters(c, s, head_free);
    char plant[32];
    int rc = plant_define(opts, name, plant, sizeof plant, e);
    if (rc != 0)
        return rc;
    bool split = c->grid > 1;
    char extra_defines[96] = ""; /* a grid split's or a stash's, and the replicas' */
    if (split)
        snprintf(extra_defines, sizeof extra_defines,
                 "#define T_GRID %u\n#define T_GRID_SLOTS %d\n", c->grid, TUNED__GRID_SLOTS);
    else if (c->stash > 0)
        snprintf(extra_defines, sizeof extra_defines, "#define T_STASH %u\n", c->stash);
    if (c->replicas > 1)
        snprintf(extra_defines + strlen(extra_defines), sizeof extra_defines - strlen(extra_defines),
                 "#define T_REPLICAS %u\n", c->replicas);
    char defines[1024];
    snprintf(defines, sizeof defines,
             "// tuned %s variant %s for %s x %llu columns\n"
             "#define T_DTYPE %d\n#define T_WARPS %u\n#define T_ROWS %u\n#define T_CLUSTER %u\n"
             "%s#define T_MIN_BLOCKS %u\n#define T_VEC %u\n#define T_ITERS %llu\n"
             "#define T_COLS %llu\n#define T_HEAD_FREE %d\n#define T_LD %u\n"
             "#define T_ST %u\n#define T_REG_PACKED %d\n#define T_EXP16 %d\n#define T_FUSED %d\n"
             "#define T_LOG %d\n#define T_BWD %d\n#define T_HEAD_ALIGN %u\n%s",
             k->name, name, tuned_dtype_name(s->dtype),
             (unsigned long long)s->cols, (int)s->dtype, c->warps, c->rows, c->cluster,
             extra_defines, minb, c->vec, (unsigned long long)iters,
             (unsigned long long)s->cols, head_free, c->ld, c->st, c->reg != TUNED__REG_F32,
             c->reg == TUNED__REG_EX, c->red == TUNED__RED_FUSED, k->define_log,
             k->define_bwd, tuned__config_head_align(c, s), plant);
    if (k->selects)
        snprintf(defines + strlen(defines), sizeof defines - strlen(defines),
                 "#define T_SEL %u\n", c->sel);
    if (k->terms_param != 0)
        snprintf(defines + strlen(defines), sizeof defines - strlen(defines),
                 "#define T_TERMS_LANES %d\n", c->terms == TUNED__TERMS_LANES);
    if ((rc = kind_defines(k, opts, defines, sizeof defines, e)) != 0 ||
        (rc = tuned__params_defines(k, s->params, defines, sizeof defines, e)) != 0)
        return rc;
    /* The kind's path for this config: its templates, in order. */
    return join_source(defines, k->path[tuned__source_path(c)].parts, TUNED__KIND_MAX_PARTS,
                       out, e);
}

int tuned__source_reference(const tuned__kind_spec *k, tuned_dtype dtype, char **out,
                            tuned__err *e)
{
    if (k == NULL)
        return tuned__errf(e, TUNED_EINVAL, "codegen: reference: unknown kernel");
    if (tuned_dtype_size(dtype) == 0)
        return tuned__errf(e, TUNED_EINVAL, "codegen: reference: unknown dtype %d", (int)dtype);
    char defines[128];
    snprintf(defines, sizeof defines, "// tuned reference kernels for %s\n#define T_DTYPE %d\n",
             tuned_dtype_name(dtype), (int)dtype);
    /* The kind's reference parts: softmax_common.cu for the dtype's size,
     * -inf and the generator's rounding; the check widens with
     * reference.cu's own conversion. */
    return join_source(defines, k->reference_parts, TUNED__KIND_MAX_PARTS, out, e);
}

int tuned__source_blocks(const tuned__kind_spec *k, tuned_dtype dtype, char **out,
                         tuned__err *e)
{
    if (k == NULL || k->block_parts[0] == NULL)
        return tuned__errf(e, TUNED_EINVAL, "codegen: %s has no kernels for vocabulary blocks",
                           k != NULL ? k->name : "an unknown kind");
    if (tuned_dtype_size(dtype) == 0)
        return tuned__errf(e, TUNED_EINVAL, "codegen: blocks: unknown dtype %d", (int)dtype);
    char defines[128];
    snprintf(defines, sizeof defines, "// tuned %s's block kernels for %s\n#define T_DTYPE %d\n",
             k->name, tuned_dtype_name(dtype), (int)dtype);
    return join_source(defines, k->block_parts, TUNED__KIND_MAX_PARTS, out, e);
}
