/* kind.c: the specs of the kernel kinds (the registry; see kind.h), and
 * what follows from a spec alone: bytes moved, code identity, names.
 *
 * Adding a kind: its line in TUNED_KERNEL_MAP (tuned.h), its template under
 * kernels/templates/ (named in src/codegen/meson.build), its spec below,
 * its float64 reference, and its tests (docs/kernels.md). */
#include "src/codegen/kind.h"

#include <stdio.h>
#include <string.h>

#include "src/codegen/cross_entropy.h"
#include "src/codegen/source.h"
#include "src/codegen/templates.h"
#include "src/common/hash.h"

/* The forward kinds' tensors and the backward kinds'. */
#define FORWARD_TENSORS                                                                     \
    .ntensors = 2,                                                                          \
    .tensor = {{"x", TUNED__TENSOR_IN, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX},            \
               {"y", TUNED__TENSOR_OUT, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX}},          \
    .params_size = 4, .scaled = true
#define BACKWARD_TENSORS                                                                    \
    .ntensors = 3,                                                                          \
    .tensor = {{"y", TUNED__TENSOR_IN, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX},            \
               {"dy", TUNED__TENSOR_IN, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX},           \
               {"dx", TUNED__TENSOR_OUT, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX}},         \
    .params_size = 0

/* The softmax family's paths: forward kernels have all three, backward
 * kernels register rows only (one block, a cluster, or the grid). */
#define FORWARD_PATHS                                                                       \
    .path = {[TUNED__PATH_ROWS] = {"tuned_softmax_rows",                                    \
                                   {"softmax_common", "softmax_rows_common", "softmax_rows"}}, \
             [TUNED__PATH_GRID] = {"tuned_softmax_grid",                                    \
                                   {"softmax_common", "softmax_rows_common",                \
                                    "softmax_grid_common", "softmax_grid"}},                \
             [TUNED__PATH_STAGED] = {"tuned_softmax_staged",                                \
                                     {"softmax_common", "softmax_staged"}}}
#define BACKWARD_PATHS                                                                      \
    .path = {[TUNED__PATH_ROWS] = {"tuned_softmax_bwd_rows",                                \
                                   {"softmax_common", "softmax_rows_common", "softmax_bwd"}}, \
             [TUNED__PATH_GRID] = {"tuned_softmax_bwd_grid",                                \
                                   {"softmax_common", "softmax_rows_common",                \
                                    "softmax_grid_common", "softmax_bwd"}}}

/* The softmax family's float64 reference (reference.cu). */
#define REFERENCE_PARTS .reference_parts = {"softmax_common", "reference"}

/* The cross-entropy kinds: one template (cross_entropy.cu, T_CE_KIND
 * choosing the kernel) on the rows family's stages, its helper kernels,
 * and its float64 check on reference.cu's helpers. Clusters keep a
 * vocabulary-long row on chip; no grid split, stash, replicas or reg=ex
 * (the gradient needs fp32 exps). */
#define CE_PARTS {"softmax_common", "softmax_rows_common", "cross_entropy", "cross_entropy_aux"}
#define CE_COMMON                                                                           \
    .params_size = sizeof(tuned__ce_params), .scaled = false,                               \
    .helper = {"tuned_cross_entropy_count", "tuned_cross_entropy_rescale",               \
               "tuned_cross_entropy_total"},                                             \
    .flag = {"T_CE_SMOOTH", "T_CE_LABEL32", "T_CE_SOFTCAP", "T_CE_ARGMAX"},                \
    .flag_int32 = {0, 2}, .flag_min_blocks = {0, 0, 2, 2},                                 \
    .rows_held = 1, .keeps_exps = false,                                                    \
    .stash = false, .replicas = false, .line_head = true,                                   \
    .reference = TUNED__REF_CROSS_ENTROPY,                                                  \
    .reference_parts = {"softmax_common", "reference", "cross_entropy_reference"}
#define LOGITS {"logits", TUNED__TENSOR_IN, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX, 0}
#define LABELS {"labels", TUNED__TENSOR_IN, TUNED__ELEM_I64, TUNED__EXTENT_ROWS, 0}
#define ROW_F32(name, role) {name, role, TUNED__ELEM_F32, TUNED__EXTENT_ROWS, 0}

/* The MoE router kinds: one template (router_topk.cu) holding a row of
 * expert logits in part of a warp; its key parameters are the routing a
 * model asks for. Its float64 reference runs on the host (the check
 * draws the logits with reference.cu's generator). */
static bool router_rule(uint64_t cols, uint32_t params, char *why, size_t n);
/* The forward's key has one parameter more than the backward's: whether
 * the calls pass a bias (set by the API from the pointer; a tune of the key
 * times the kernel with one where it is 1: the bias moves the scores
 * before the choice). */
#define ROUTER_PARAM_LIST                                                                    \
    {"k", "T_TOPK", 0, 7, 1, 64, 8, {NULL}},                                                \
        {"score", "T_SCORE", 7, 2, 0, 2, 0, {"softmax", "sigmoid", "sqrt_softplus"}},       \
        {"groups", "T_GROUPS", 9, 6, 1, 32, 1, {NULL}},                                     \
        {"topk_group", "T_TOPK_GROUP", 15, 6, 1, 32, 1, {NULL}},                            \
        {"renorm", "T_RENORM", 21, 1, 0, 1, 0, {NULL}}
#define ROUTER_BIAS_PARAM 5 /* the forward's sixth: the bias tensor's present_param - 1 */
#define ROUTER_RENORM_PARAM 4 /* renorm: the forward's terms_param - 1 */
#define ROUTER_PARAMS                                                                        \
    .nparams = 6, .param = {ROUTER_PARAM_LIST, {"bias", "T_KEY_BIAS", 22, 1, 0, 1, 0, {NULL}}}, \
    .params_rule = router_rule, .example_cols = 128
#define ROUTER_BWD_PARAMS                                                                    \
    .nparams = 5, .param = {ROUTER_PARAM_LIST}, .params_rule = router_rule, .example_cols = 128
#define ROUTER_COMMON                                                                        \
    .params_size = 4, .scaled = true, .rows_held = 1, .pairs = false,                       \
    .keeps_exps = false, .stash = false, .replicas = false, .line_head = false,             \
    .max_row_threads = 32, .max_thread_elems = 64, .fixed_registers = true,                \
    .reference_parts = {"softmax_common", "reference"}
#define ROUTER_PATH {"tuned_router_topk", {"softmax_common", "router_topk", "router_rank"}}
#define ROUTER_BWD_PATH {"tuned_router_topk_bwd", {"softmax_common", "router_topk"}}

static const tuned__kind_spec specs[] = {
    {
        .id = TUNED_KERNEL_SOFTMAX,
        .name = "softmax",
        .math = "y = exp(s x - max(s x)) / sum exp(s x - max(s x))",
        FORWARD_TENSORS,
        .define_log = 0, .define_bwd = 0,
        FORWARD_PATHS,
        .rows_held = 1, .pairs = true, .keeps_exps = true, .stash = true, .replicas = true,
        .line_head = true,
        .reference = TUNED__REF_FORWARD, REFERENCE_PARTS,
        .legacy_code = 0xd4caee083e2bebdeull,
    },
    {
        .id = TUNED_KERNEL_SOFTMAX_BWD,
        .name = "softmax_bwd",
        .math = "dx = y (dy - sum(dy y))",
        BACKWARD_TENSORS,
        .define_log = 0, .define_bwd = 1,
        BACKWARD_PATHS,
        .rows_held = 2, .pairs = false, .keeps_exps = false, .stash = false,
        .replicas = false, .line_head = false,
        .reference = TUNED__REF_BACKWARD, REFERENCE_PARTS,
        .legacy_code = 0x5e065215dda55310ull,
    },
    {
        .id = TUNED_KERNEL_LOG_SOFTMAX,
        .name = "log_softmax",
        .math = "y = s x - max(s x) - log sum exp(s x - max(s x))",
        FORWARD_TENSORS,
        .define_log = 1, .define_bwd = 0,
        FORWARD_PATHS,
        /* its store writes s x - lse from the inputs it keeps, not exps */
        .rows_held = 1, .pairs = true, .keeps_exps = false, .stash = true, .replicas = true,
        .line_head = true,
        .reference = TUNED__REF_FORWARD, REFERENCE_PARTS,
        .legacy_code = 0x117ad24b30347c38ull,
    },
    {
        .id = TUNED_KERNEL_LOG_SOFTMAX_BWD,
        .name = "log_softmax_bwd",
        .math = "dx = dy - exp(y) sum(dy)",
        BACKWARD_TENSORS,
        .define_log = 1, .define_bwd = 1,
        BACKWARD_PATHS,
        .rows_held = 2, .pairs = false, .keeps_exps = false, .stash = false,
        .replicas = false, .line_head = false,
        .reference = TUNED__REF_BACKWARD, REFERENCE_PARTS,
        .legacy_code = 0x9db67f3eb875f4eeull,
    },
    {
        .id = TUNED_KERNEL_CROSS_ENTROPY,
        .name = "cross_entropy",
        .math = "loss = lse(s x) - s x_y (+ smoothing, z lse^2); grad = gscale d loss / d x",
        .ntensors = 5,
        .tensor = {LOGITS, LABELS,
                   {"grad", TUNED__TENSOR_OUT, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX, 1},
                   ROW_F32("loss", TUNED__TENSOR_OUT), ROW_F32("lse", TUNED__TENSOR_OUT)},
        CE_COMMON,
        .defines = "#define T_CE_KIND 0\n",
        .path = {[TUNED__PATH_ROWS] = {"tuned_cross_entropy_rows", CE_PARTS}},
        .pairs = true,
    },
    {
        .id = TUNED_KERNEL_CROSS_ENTROPY_LOSS,
        .name = "cross_entropy_loss",
        .math = "loss = lse(s x) - s x_y (+ smoothing, z lse^2), no gradient: one read",
        .ntensors = 5,
        .tensor = {LOGITS, LABELS,
                   {"grad", TUNED__TENSOR_UNUSED, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX, 0},
                   ROW_F32("loss", TUNED__TENSOR_OUT), ROW_F32("lse", TUNED__TENSOR_OUT)},
        CE_COMMON,
        .defines = "#define T_CE_KIND 1\n",
        .path = {[TUNED__PATH_ROWS] = {"tuned_cross_entropy_rows", CE_PARTS}},
        .pairs = true,
    },
    {
        .id = TUNED_KERNEL_CROSS_ENTROPY_BWD,
        .name = "cross_entropy_bwd",
        .math = "grad = gscale s (exp(s x - lse) - [j == y] ...), from the saved lse",
        .ntensors = 4,
        .tensor = {LOGITS, LABELS, ROW_F32("lse", TUNED__TENSOR_IN),
                   {"grad", TUNED__TENSOR_OUT, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX, 1}},
        CE_COMMON,
        .defines = "#define T_CE_KIND 2\n",
        .path = {[TUNED__PATH_ROWS] = {"tuned_cross_entropy_bwd", CE_PARTS}},
        /* no reduction at all: no pairs */
        .pairs = false,
    },
    {
        .id = TUNED_KERNEL_ROUTER_TOPK,
        .name = "router_topk",
        .math = "ids, w = top k of score(x) (+ bias), w = s score_id (/ sum if renorm)",
        .ntensors = 6,
        .tensor = {LOGITS,
                   {"bias", TUNED__TENSOR_IN, TUNED__ELEM_F32, TUNED__EXTENT_COLS, 0, 1,
                    ROUTER_BIAS_PARAM + 1},
                   {"weights", TUNED__TENSOR_OUT, TUNED__ELEM_F32, TUNED__EXTENT_ROWS_K, 0},
                   {"ids", TUNED__TENSOR_OUT, TUNED__ELEM_I64, TUNED__EXTENT_ROWS_K, 0},
                   {"counts", TUNED__TENSOR_OUT, TUNED__ELEM_I32, TUNED__EXTENT_COLS, 0, 1},
                   {"source_rows", TUNED__TENSOR_OUT, TUNED__ELEM_I32, TUNED__EXTENT_ROWS_K, 0,
                    1, 0, 1}},
        .flag = {"T_IDS32", "T_WEIGHTS_BF16"},
        .flag_int32 = {4}, /* T_IDS32: ids int32 */
        .flag_bf16 = {0, 3}, /* T_WEIGHTS_BF16: weights bf16 */
        ROUTER_COMMON, ROUTER_PARAMS,
        .fixed_store_hint = true,
        .selects = true, /* the backward only scatters: it has no sel */
        .terms_param = ROUTER_RENORM_PARAM + 1,
        .path = {[TUNED__PATH_ROWS] = ROUTER_PATH},
        .reference = TUNED__REF_ROUTER,
    },
    {
        .id = TUNED_KERNEL_ROUTER_TOPK_BWD,
        .name = "router_topk_bwd",
        .math = "dx = d w / d x . dw through the score and the renormalisation",
        .ntensors = 4,
        .tensor = {LOGITS,
                   {"ids", TUNED__TENSOR_IN, TUNED__ELEM_I64, TUNED__EXTENT_ROWS_K, 0},
                   {"dweights", TUNED__TENSOR_IN, TUNED__ELEM_F32, TUNED__EXTENT_ROWS_K, 0},
                   {"dlogits", TUNED__TENSOR_OUT, TUNED__ELEM_DTYPE, TUNED__EXTENT_MATRIX, 0}},
        .flag = {"T_IDS32"},
        .flag_int32 = {2},
        ROUTER_COMMON, ROUTER_BWD_PARAMS,
        .path = {[TUNED__PATH_ROWS] = ROUTER_BWD_PATH},
        .reference = TUNED__REF_ROUTER_BWD,
    },
    {
        /* An LM head's loss: tokens x vocabulary logits that are never held
         * whole. A config is a chunk of rows (chunk1024); the evaluation
         * (src/driver/lce.c) runs cuBLAS's GEMMs around cross_entropy's
         * fused kernel, a chunk at a time, as tuned.linear_cross_entropy
         * does. Key: rows = tokens, cols = vocabulary, parameters the
         * hidden size and the chunk logits' budget in MiB (256: the
         * Python call's default). */
        .id = TUNED_KERNEL_LINEAR_CROSS_ENTROPY,
        .name = "linear_cross_entropy",
        .math = "mean cross-entropy of hidden weight^T, and d hidden, d weight; a chunk of "
                "rows at a time",
        .ntensors = 6,
        .tensor = {{"hidden", TUNED__TENSOR_IN, TUNED__ELEM_DTYPE, TUNED__EXTENT_ROWS_HIDDEN, 0},
                   {"weight", TUNED__TENSOR_IN, TUNED__ELEM_DTYPE, TUNED__EXTENT_COLS_HIDDEN, 0},
                   LABELS,
                   {"dhidden", TUNED__TENSOR_OUT, TUNED__ELEM_DTYPE, TUNED__EXTENT_ROWS_HIDDEN, 0},
                   {"dweight", TUNED__TENSOR_OUT, TUNED__ELEM_DTYPE, TUNED__EXTENT_COLS_HIDDEN, 0},
                   ROW_F32("loss", TUNED__TENSOR_OUT)},
        .params_size = 0,
        .rows_held = 1,
        .nparams = 2,
        .param = {{"hidden", "T_LCE_HIDDEN", 0, 16, 1, 32768, 4096, {NULL}},
                  {"budget", "T_LCE_BUDGET_MIB", 16, 16, 16, 65535, 256, {NULL}}},
        .example_cols = 32000,
        .evaluate = TUNED__EVALUATE_CHUNKED_LINEAR_CE,
        .inner = TUNED_KERNEL_CROSS_ENTROPY,
        .block_lse = TUNED_KERNEL_CROSS_ENTROPY_LOSS,
        .block_grad = TUNED_KERNEL_CROSS_ENTROPY_BWD,
        .block_parts = {"softmax_common", "linear_ce_blocks"},
    },
};

/* What the router's ranges alone do not say: k and the groups against the
 * experts. */
static bool router_rule(uint64_t cols, uint32_t params, char *why, size_t n)
{
    const tuned__kind_spec *k = tuned__kind(TUNED_KERNEL_ROUTER_TOPK);
    unsigned topk = tuned__params_value(k, params, "k", 1);
    unsigned groups = tuned__params_value(k, params, "groups", 1);
    unsigned kept = tuned__params_value(k, params, "topk_group", 1);
    const char *bad = NULL;
    char buf[160];
    if (cols < 2 || cols > 2048)
        snprintf(buf, sizeof buf, "%llu experts (2 to 2048)", (unsigned long long)cols), bad = buf;
    else if (topk > cols)
        snprintf(buf, sizeof buf, "k %u is more than the %llu experts", topk,
                 (unsigned long long)cols), bad = buf;
    else if (cols % groups != 0)
        snprintf(buf, sizeof buf, "%u groups do not divide %llu experts", groups,
                 (unsigned long long)cols), bad = buf;
    else if (kept > groups)
        snprintf(buf, sizeof buf, "topk_group %u is more than the %u groups", kept, groups),
            bad = buf;
    else if (topk > kept * (cols / groups))
        snprintf(buf, sizeof buf, "k %u is more than the %u kept groups of %llu experts hold",
                 topk, kept, (unsigned long long)(cols / groups)), bad = buf;
    if (bad != NULL && why != NULL)
        snprintf(why, n, "router: %s", bad);
    return bad == NULL;
}

#define NSPECS (sizeof specs / sizeof specs[0])

/* Every kind of the public list has a spec, in id order (checked in full
 * by test_codegen's registry case; the count here). */
#define COUNT_KIND(name, value, text) +1
_Static_assert(NSPECS == 0 TUNED_KERNEL_MAP(COUNT_KIND), "one spec per TUNED_KERNEL_MAP entry");
#undef COUNT_KIND

const tuned__kind_spec *tuned__kind(unsigned id)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (specs[i].id == id)
            return &specs[i];
    return NULL;
}

const tuned__kind_spec *tuned__kind_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < NSPECS; i++)
        if (strcmp(specs[i].name, name) == 0)
            return &specs[i];
    return NULL;
}

size_t tuned__kind_count(void)
{
    return NSPECS;
}

const tuned__kind_spec *tuned__kind_at(size_t i)
{
    return i < NSPECS ? &specs[i] : NULL;
}

const char *tuned_kernel_name(tuned_kernel kernel)
{
    const tuned__kind_spec *k = tuned__kind((unsigned)kernel);
    return k != NULL ? k->name : NULL;
}

int tuned_kernel_parse(const char *name, tuned_kernel *out)
{
    const tuned__kind_spec *k = tuned__kind_find(name);
    if (k == NULL)
        return TUNED_EINVAL;
    *out = (tuned_kernel)k->id;
    return 0;
}

void tuned__kind_list(char *buf, size_t n)
{
    size_t at = 0;
    if (n == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < NSPECS && at < n; i++) {
        int w = snprintf(buf + at, n - at, "%s%s", i > 0 ? ", " : "", specs[i].name);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

static size_t elem_size(const tuned__tensor_spec *t, size_t esize)
{
    switch (t->elem) {
    case TUNED__ELEM_F32:
    case TUNED__ELEM_I32: return 4;
    case TUNED__ELEM_I64: return 8;
    default: return esize;
    }
}

size_t tuned__kind_elem_size(const tuned__kind_spec *k, unsigned i, size_t esize)
{
    return elem_size(&k->tensor[i], esize);
}

size_t tuned__kind_elem_size_flags(const tuned__kind_spec *k, unsigned i, size_t esize,
                                   unsigned flags)
{
    for (unsigned f = 0; f < TUNED__KIND_MAX_FLAGS; f++) {
        if ((flags & (1u << f)) && k->flag_int32[f] == i + 1)
            return 4;
        if ((flags & (1u << f)) && k->flag_bf16[f] == i + 1)
            return 2;
    }
    return elem_size(&k->tensor[i], esize);
}

/* Elements of tensor t for rows x cols (wire: the key parameters above
 * bit 32), a MATRIX counted as dense. */
static double tensor_elems(const tuned__kind_spec *k, const tuned__tensor_spec *t, uint64_t rows,
                           uint64_t wire)
{
    uint64_t cols = tuned__wire_cols_cols(wire);
    switch (t->extent) {
    case TUNED__EXTENT_ROWS: return (double)rows;
    case TUNED__EXTENT_ROWS_K:
        return (double)rows * (double)tuned__params_value(k, tuned__wire_params(wire), "k", 1);
    case TUNED__EXTENT_COLS: return (double)cols;
    case TUNED__EXTENT_ROWS_HIDDEN:
        return (double)rows *
               (double)tuned__params_value(k, tuned__wire_params(wire), "hidden", 1);
    case TUNED__EXTENT_COLS_HIDDEN:
        return (double)cols *
               (double)tuned__params_value(k, tuned__wire_params(wire), "hidden", 1);
    default: return (double)rows * (double)cols;
    }
}

uint64_t tuned__kind_span(const tuned__kind_spec *k, unsigned i, uint64_t rows, uint64_t cols,
                          uint64_t row_stride, size_t esize, unsigned flags)
{
    const tuned__tensor_spec *t = &k->tensor[i];
    size_t es = tuned__kind_elem_size_flags(k, i, esize, flags);
    if (t->extent != TUNED__EXTENT_MATRIX)
        return (uint64_t)tensor_elems(k, t, rows, cols) * es;
    return ((rows - 1) * row_stride + tuned__wire_cols_cols(cols)) * es;
}

double tuned__kind_bytes(const tuned__kind_spec *k, uint64_t rows, uint64_t cols, size_t esize)
{
    double bytes = 0;
    for (unsigned i = 0; i < k->ntensors; i++) {
        const tuned__tensor_spec *t = &k->tensor[i];
        /* an optional tensor counts where a timing passes it (a router's
         * bias where its key says calls pass one; never its counts or
         * source rows) */
        if (!tuned__tensor_timed(k, i, tuned__wire_params(cols)))
            continue;
        bytes += tensor_elems(k, t, rows, cols) * (double)elem_size(t, esize);
    }
    return bytes;
}

double tuned__kind_copies(const tuned__kind_spec *k, uint64_t rows, uint64_t cols, size_t esize)
{
    /* a composite's measured floor is its floor: no bytes to scale it by */
    if (k->evaluate != TUNED__EVALUATE_KERNEL)
        return 1.0;
    return tuned__kind_bytes(k, rows, cols, esize) /
           (2.0 * (double)rows * (double)tuned__wire_cols_cols(cols) * (double)esize);
}

unsigned tuned__kind_matrices(const tuned__kind_spec *k)
{
    unsigned n = 0;
    for (unsigned i = 0; i < k->ntensors; i++)
        n += k->tensor[i].role != TUNED__TENSOR_UNUSED &&
             k->tensor[i].extent == TUNED__EXTENT_MATRIX;
    return n;
}

bool tuned__kind_in_place(const tuned__kind_spec *k)
{
    for (unsigned i = 0; i < k->ntensors; i++)
        if (k->tensor[i].in_place != 0)
            return true;
    return false;
}

static unsigned first_with_role(const tuned__kind_spec *k, uint8_t role)
{
    for (unsigned i = 0; i < k->ntensors; i++)
        if (k->tensor[i].role == role)
            return i;
    return 0;
}

unsigned tuned__kind_first_in(const tuned__kind_spec *k)
{
    return first_with_role(k, TUNED__TENSOR_IN);
}

unsigned tuned__kind_first_out(const tuned__kind_spec *k)
{
    return first_with_role(k, TUNED__TENSOR_OUT);
}

/* Whether part is among the parts of paths before path p, or before index
 * j of path p: each template is hashed once, where it is first used. */
static bool part_seen(const tuned__kind_spec *k, unsigned p, unsigned j)
{
    const char *part = k->path[p].parts[j];
    for (unsigned q = 0; q <= p; q++)
        for (unsigned i = 0; (q < p || i < j) && i < TUNED__KIND_MAX_PARTS &&
                             k->path[q].parts[i] != NULL;
             i++)
            if (strcmp(k->path[q].parts[i], part) == 0)
                return true;
    return false;
}

uint64_t tuned__kind_code_hash(const tuned__kind_spec *k)
{
    uint64_t h = TUNED__FNV_SEED;
    h = tuned__fnv1a64(k->name, strlen(k->name), h);
    for (unsigned p = 0; p < TUNED__PATH_COUNT; p++) {
        if (k->path[p].entry == NULL)
            continue;
        h = tuned__fnv1a64(k->path[p].entry, strlen(k->path[p].entry), h);
        for (unsigned j = 0; j < TUNED__KIND_MAX_PARTS && k->path[p].parts[j] != NULL; j++) {
            if (part_seen(k, p, j))
                continue;
            const tuned__template *t = tuned__template_find(k->path[p].parts[j]);
            /* a missing part is refused at codegen; hash its name */
            if (t != NULL)
                h = tuned__fnv1a64(t->text, t->size, h);
            else
                h = tuned__fnv1a64(k->path[p].parts[j], strlen(k->path[p].parts[j]), h);
        }
    }
    int defines[2] = {k->define_log, k->define_bwd};
    h = tuned__fnv1a64(defines, sizeof defines, h);
    /* A kind from before these fields has none of them: its hash stays. */
    if (k->defines != NULL)
        h = tuned__fnv1a64(k->defines, strlen(k->defines), h);
    for (unsigned i = 0; i < TUNED__KIND_MAX_FLAGS && k->flag[i] != NULL; i++)
        h = tuned__fnv1a64(k->flag[i], strlen(k->flag[i]), h);
    for (unsigned i = 0; i < TUNED__KIND_MAX_HELPERS && k->helper[i] != NULL; i++)
        h = tuned__fnv1a64(k->helper[i], strlen(k->helper[i]), h);
    /* A composite evaluation runs its inner and block kinds' kernels and
     * its block templates: a change there moves its results too. (Kinds
     * without one hash as before.) */
    if (k->evaluate != TUNED__EVALUATE_KERNEL) {
        const unsigned ran[3] = {k->inner, k->block_lse, k->block_grad};
        for (unsigned i = 0; i < 3; i++) {
            const tuned__kind_spec *inner = tuned__kind(ran[i]);
            uint64_t ih = inner != NULL ? tuned__kind_code_hash(inner) : 0;
            h = tuned__fnv1a64(&ih, sizeof ih, h);
        }
        for (unsigned j = 0; j < TUNED__KIND_MAX_PARTS && k->block_parts[j] != NULL; j++) {
            const tuned__template *t = tuned__template_find(k->block_parts[j]);
            h = t != NULL ? tuned__fnv1a64(t->text, t->size, h)
                          : tuned__fnv1a64(k->block_parts[j], strlen(k->block_parts[j]), h);
        }
        unsigned how[2] = {k->evaluate, TUNED__COMPOSITE_VERSION};
        h = tuned__fnv1a64(how, sizeof how, h);
    }
    unsigned version = TUNED__CODEGEN_VERSION;
    return tuned__fnv1a64(&version, sizeof version, h);
}

uint64_t tuned__kind_identity_hash(const tuned__kind_spec *k)
{
    uint64_t code = tuned__kind_code_hash(k);
    return k->legacy_code != 0 && code == k->legacy_code ? TUNED__LEGACY_CODE_HASH : code;
}

const char *tuned__kernel_name(uint8_t kernel)
{
    return tuned_kernel_name((tuned_kernel)kernel);
}

int tuned__kernel_parse(const char *name, uint8_t *out)
{
    const tuned__kind_spec *k = tuned__kind_find(name);
    if (k == NULL)
        return TUNED_EINVAL;
    *out = k->id;
    return 0;
}

uint64_t tuned__templates_hash(void)
{
    return tuned__kind_identity_hash(tuned__kind(TUNED__KIND_DEFAULT));
}

bool tuned__kind_default_code(const tuned__kind_spec *k)
{
    return k == NULL ||
           tuned__kind_identity_hash(k) == tuned__kind_identity_hash(tuned__kind(TUNED__KIND_DEFAULT));
}

bool tuned__kind_chunked(const tuned__kind_spec *k)
{
    return k != NULL && k->evaluate == TUNED__EVALUATE_CHUNKED_LINEAR_CE;
}

uint32_t tuned__kind_chunk_rule(const tuned__kind_spec *k, uint64_t rows, uint64_t cols,
                                uint32_t params, size_t esize)
{
    /* the key's budget of chunk logits, in MiB */
    uint64_t budget = (uint64_t)tuned__params_value(k, params, "budget", 0) << 20;
    uint64_t row_bytes = cols * esize;
    uint64_t chunk =
        row_bytes > 0 ? budget / row_bytes / TUNED__CHUNK_STEP * TUNED__CHUNK_STEP : 0;
    if (chunk < TUNED__CHUNK_STEP)
        chunk = TUNED__CHUNK_STEP;
    if (chunk > rows)
        chunk = rows;
    if (chunk > TUNED__MAX_CHUNK)
        chunk = TUNED__MAX_CHUNK / TUNED__CHUNK_STEP * TUNED__CHUNK_STEP;
    return (uint32_t)(chunk > 0 ? chunk : 1);
}

uint64_t tuned__kind_block_cols(uint64_t cols, unsigned splits)
{
    if (splits <= 1 || cols <= 64)
        return cols;
    uint64_t per_block = (cols + splits - 1) / splits;
    uint64_t step = (per_block + 63) / 64 * 64;
    return step < cols ? step : cols;
}

int tuned__kind_chunk_splits(const tuned__kind_spec *k, uint32_t chunk, uint64_t cols,
                             uint32_t params, size_t esize)
{
    uint64_t budget = (uint64_t)tuned__params_value(k, params, "budget", 0) << 20;
    if (chunk > 0 && (uint64_t)chunk * cols * esize <= budget)
        return 0;
    for (unsigned s = 2; chunk > 0 && s <= TUNED__MAX_SPLITS; s++)
        if ((uint64_t)chunk * tuned__kind_block_cols(cols, s) * esize <= budget)
            return (int)s;
    return -1;
}

uint64_t tuned__kind_chunk_elems(const tuned__kind_spec *k, uint64_t rows, uint64_t cols,
                                 uint32_t params, size_t esize)
{
    uint64_t whole = (uint64_t)tuned__kind_chunk_rule(k, rows, cols, params, esize) * cols;
    uint64_t budget = esize > 0 ? ((uint64_t)tuned__params_value(k, params, "budget", 0) << 20) /
                                      esize
                                : 0;
    uint64_t most = whole > budget ? whole : budget;
    return most < rows * cols ? most : rows * cols;
}

const char *tuned__kind_floor_text(const tuned__kind_spec *k)
{
    if (tuned__kind_chunked(k))
        return "the GEMMs alone, each block's logits once, at the key's rows";
    return "copy of one tensor (roofline)";
}
