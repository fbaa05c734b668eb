/* api_router.c: the router kinds' entry points (tuned.h): the options
 * checked and turned into the kind's key parameters (k, score, groups,
 * renorm: one compiled, tuned and stored kernel each), its compiled-in
 * int32 ids and bf16 weights, and its optional source rows. The call
 * itself is the registry's, as for every kind (api.c); the routed scaling
 * factor is the call's scale. */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "src/api/handle.h"

void tuned_router_options_init(tuned_router_options *o)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof *o);
    o->k = 8;
    o->score = TUNED_ROUTER_SOFTMAX;
    o->num_groups = 1;
    o->topk_group = 1;
    o->scaling = 1.0f;
}

/* The key parameters of o for experts, or an error said as fn's. */
static int router_params(const tuned_handle *h, const char *fn, const tuned__kind_spec *kind,
                         const tuned_router_options *o, int64_t experts, uint32_t *word)
{
    if ((unsigned)o->score > (unsigned)TUNED_ROUTER_SQRT_SOFTPLUS)
        return tuned__api_failf(h, TUNED_EINVAL,
                                "%s: score %d (softmax 0, sigmoid 1, sqrt_softplus 2)", fn,
                                (int)o->score);
    if (!(o->scaling > 0.0f && o->scaling <= FLT_MAX))
        return tuned__api_failf(h, TUNED_EINVAL,
                                "%s: scaling %g (it must be positive and finite)", fn,
                                (double)o->scaling);
    /* the options in the order of the kind's key parameters (kind.c:
     * k, score, groups, topk_group, renorm), each held to its range */
    const int values[] = {o->k, (int)o->score, o->num_groups, o->topk_group, o->renorm != 0};
    _Static_assert(sizeof values / sizeof values[0] <= TUNED__KIND_MAX_PARAMS,
                   "a value for each key parameter");
    uint32_t w = tuned__params_default(kind);
    for (unsigned i = 0; i < kind->nparams && i < sizeof values / sizeof values[0]; i++) {
        const tuned__key_param *p = &kind->param[i];
        if (values[i] < (int)p->min || values[i] > (int)p->max)
            return tuned__api_failf(h, TUNED_EINVAL, "%s: %s %d (%d to %d)", fn, p->name,
                                    values[i], (int)p->min, (int)p->max);
        w = tuned__params_set(kind, w, i, (unsigned)values[i]);
    }
    char why[192];
    if (experts >= 1 && experts <= (int64_t)TUNED__MAX_COLS &&
        !tuned__params_check(kind, (uint64_t)experts, w, why, sizeof why))
        return tuned__api_failf(h, TUNED_EINVAL, "%s: %s", fn, why);
    *word = w;
    return 0;
}

/* One router call of kind kernel with the kind's tensors ptrs. */
static int router_call(tuned_handle *h, const char *fn, tuned_kernel kernel,
                       const void *const *ptrs, int64_t rows, int64_t experts, int64_t row_stride,
                       tuned_dtype dtype, const tuned_router_options *opt, void *stream)
{
    if (h == NULL)
        return tuned__api_failf(NULL, TUNED_EINVAL, "%s: the handle is NULL", fn);
    tuned_router_options defaults;
    tuned_router_options_init(&defaults);
    const tuned_router_options *o = opt != NULL ? opt : &defaults;
    tuned__api_args a = {fn, tuned__kind((unsigned)kernel), {NULL}, NULL, 0, 0};
    int rc = router_params(h, fn, a.kind, o, experts, &a.key_params);
    if (rc != 0)
        return rc;
    /* the kinds' flag 0: T_IDS32; the forward's flag 1: T_WEIGHTS_BF16 (the
     * backward's dweights are fp32 whatever the forward wrote) */
    const bool forward = kernel == TUNED_KERNEL_ROUTER_TOPK;
    a.flags = (o->ids_int32 ? TUNED__ROUTER_FLAG_IDS32 : 0u) |
              (forward && o->weights_bf16 ? TUNED__ROUTER_FLAG_WEIGHTS_BF16 : 0u);
    for (unsigned i = 0; i < a.kind->ntensors; i++)
        a.ptr[i] = ptrs[i];
    tuned__api_entry *e;
    if ((rc = tuned__api_resolve(h, &a, rows, experts, row_stride, dtype, o->scaling, stream,
                                 &e)) != 0)
        return rc;
    return tuned__api_launch(h, &a, e, rows, experts, row_stride, dtype, o->scaling, stream);
}

int tuned_router_topk(tuned_handle *h, const void *logits, const float *bias, void *weights,
                      void *ids, int *counts, int64_t rows, int64_t experts, int64_t row_stride,
                      tuned_dtype dtype, const tuned_router_options *o, void *stream)
{
    const void *ptrs[] = {logits, bias, weights, ids, counts,
                          o != NULL ? (const void *)o->source_rows : NULL};
    return router_call(h, "tuned_router_topk", TUNED_KERNEL_ROUTER_TOPK, ptrs, rows, experts,
                       row_stride, dtype, o, stream);
}

int tuned_router_topk_backward(tuned_handle *h, const void *logits, const void *ids,
                               const float *dweights, void *dlogits, int64_t rows,
                               int64_t experts, int64_t row_stride, tuned_dtype dtype,
                               const tuned_router_options *o, void *stream)
{
    const void *ptrs[] = {logits, ids, dweights, dlogits};
    return router_call(h, "tuned_router_topk_backward", TUNED_KERNEL_ROUTER_TOPK_BWD, ptrs, rows,
                       experts, row_stride, dtype, o, stream);
}
