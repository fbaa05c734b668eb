/* api_ce.c: the cross-entropy kinds' entry points (tuned.h): the options
 * turned into the kernels' options block, the valid-row count launched
 * before a "mean" call, the reduced loss launched after a call that asks
 * for it, and the rescale of a fused gradient once autograd knows the
 * upstream gradient. The call itself is the registry's, as for every kind
 * (api.c). */
#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "src/api/handle.h"
#include "src/codegen/cross_entropy.h"

void tuned_ce_options_init(tuned_ce_options *o)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof *o);
    o->scale = 1.0f;
    o->ignore_index = -100;
    o->reduction = TUNED_REDUCTION_MEAN;
}

/* The class slice of a call over cols columns: a forward's must be the
 * whole row; a backward's lies inside rows of o->classes classes. */
static int ce_slice(const tuned_handle *h, const char *fn, const tuned_ce_options *o,
                    int64_t cols, bool backward)
{
    if (o->class_offset == 0 && (o->classes == 0 || o->classes == cols))
        return 0;
    if (!backward)
        return tuned__api_failf(h, TUNED_EINVAL,
                                "%s: class_offset %lld and classes %lld: a slice of the classes "
                                "is the backward's (tuned_cross_entropy_backward); pass 0 and 0",
                                fn, (long long)o->class_offset, (long long)o->classes);
    if (o->class_offset < 0 || o->classes < 1 || o->classes > INT32_MAX || cols < 1 ||
        o->class_offset > o->classes - cols)
        return tuned__api_failf(h, TUNED_EINVAL,
                                "%s: columns [%lld, %lld + %lld) are not a slice of rows of "
                                "classes %lld (class_offset >= 0, class_offset + cols <= "
                                "classes <= %d)",
                                fn, (long long)o->class_offset, (long long)o->class_offset,
                                (long long)cols, (long long)o->classes, INT32_MAX);
    return 0;
}

/* The options block for o, or an error said as fn's. */
static int ce_params(const tuned_handle *h, const char *fn, const tuned_ce_options *o,
                     tuned__ce_params *p, unsigned *flags)
{
    if (!(o->scale > 0.0f && o->scale <= FLT_MAX))
        return tuned__api_failf(h, TUNED_EINVAL, "%s: scale %g (it must be positive and finite)",
                                fn, (double)o->scale);
    if (!(o->label_smoothing >= 0.0f && o->label_smoothing <= 1.0f))
        return tuned__api_failf(h, TUNED_EINVAL, "%s: label_smoothing %g (it must be in [0, 1])",
                                fn, (double)o->label_smoothing);
    if (!(o->z_loss >= 0.0f && o->z_loss <= FLT_MAX))
        return tuned__api_failf(h, TUNED_EINVAL, "%s: z_loss %g (it must be >= 0 and finite)",
                                fn, (double)o->z_loss);
    if (!(o->softcap >= 0.0f && o->softcap <= FLT_MAX))
        return tuned__api_failf(h, TUNED_EINVAL,
                                "%s: softcap %g (0 for none, else positive and finite)", fn,
                                (double)o->softcap);
    if ((unsigned)o->reduction > (unsigned)TUNED_REDUCTION_MEAN)
        return tuned__api_failf(h, TUNED_EINVAL, "%s: reduction %d (none 0, sum 1, mean 2)", fn,
                                (int)o->reduction);
    if (o->reduction == TUNED_REDUCTION_MEAN &&
        (o->workspace == NULL || (uintptr_t)o->workspace % 4 != 0))
        return tuned__api_failf(h, TUNED_EINVAL,
                                "%s: reduction mean needs a 4-byte aligned workspace of "
                                "TUNED_CE_WORKSPACE_BYTES (the valid rows are counted there)",
                                fn);
    if ((o->grad_output != NULL && (uintptr_t)o->grad_output % 4 != 0) ||
        (o->z_out != NULL && (uintptr_t)o->z_out % 4 != 0) ||
        (o->error != NULL && (uintptr_t)o->error % 4 != 0) ||
        (o->lse_lo != NULL && (uintptr_t)o->lse_lo % 4 != 0) ||
        (o->total != NULL && (uintptr_t)o->total % 4 != 0))
        return tuned__api_failf(h, TUNED_EINVAL, "%s: grad_output, z_out, error, lse_lo and "
                                                 "total must be 4-byte aligned", fn);
    if (o->total != NULL && o->reduction == TUNED_REDUCTION_NONE)
        return tuned__api_failf(h, TUNED_EINVAL, "%s: total is the reduced loss of reduction "
                                                 "sum or mean; reduction none has none", fn);
    if (o->argmax != NULL && (uintptr_t)o->argmax % (o->labels_int32 ? 4u : 8u) != 0)
        return tuned__api_failf(h, TUNED_EINVAL, "%s: argmax must be %d-byte aligned (%s)", fn,
                                o->labels_int32 ? 4 : 8, o->labels_int32 ? "int32" : "int64");
    memset(p, 0, sizeof *p);
    p->scale = o->scale;
    p->smoothing = o->label_smoothing;
    p->z_loss = o->z_loss;
    p->ignore_index = o->ignore_index;
    p->grad_per_row = o->reduction == TUNED_REDUCTION_NONE && o->grad_output != NULL;
    p->grad_scale = o->reduction == TUNED_REDUCTION_MEAN ? (const float *)o->workspace
                                                         : o->grad_output;
    p->z_out = o->z_out;
    p->error = o->error;
    p->argmax = o->argmax;
    p->softcap = o->softcap;
    p->classes = (int32_t)o->classes;
    p->class_offset = o->class_offset;
    p->lse_lo = o->lse_lo;
    *flags = (o->label_smoothing != 0.0f ? TUNED__CE_FLAG_SMOOTH : 0u) |
             (o->labels_int32 ? TUNED__CE_FLAG_LABEL32 : 0u) |
             (o->softcap != 0.0f ? TUNED__CE_FLAG_SOFTCAP : 0u) |
             (o->argmax != NULL ? TUNED__CE_FLAG_ARGMAX : 0u);
    return 0;
}

/* The count's and the reduced loss's block: CE_BLOCK_THREADS in
 * cross_entropy.cu, whose block sum reads every warp's. */
#define CE_HELPER_BLOCK 1024

/* A helper kernel of the entry's module (the kind's spec names them), grid
 * blocks of block threads on the call's stream, or the launch's error said
 * as fn's. */
static int launch_helper(tuned_handle *h, const char *fn, CUfunction f, unsigned grid,
                         unsigned block, void **args, void *stream, const char *what)
{
    CUresult r = h->d->cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, (CUstream)stream, args,
                                      NULL);
    if (r == CUDA_SUCCESS)
        return 0;
    tuned__err err = {0};
    char context[160];
    snprintf(context, sizeof context, "%s: launching %s", fn, what);
    tuned__cuda_check(h->d, r, &err, context);
    return tuned__api_fail(h, &err);
}

/* A "mean" call's count of the rows not ignored, and its gradient scale,
 * into the workspace: the helper kernel launched before the loss kernel,
 * on the same stream. */
static int count_rows(tuned_handle *h, const char *fn, const tuned__api_entry *e,
                      const void *labels, int64_t rows, const tuned_ce_options *o, void *stream)
{
    CUdeviceptr lab = (CUdeviceptr)(uintptr_t)labels;
    long long n = rows, ignore = o->ignore_index;
    CUdeviceptr upstream = (CUdeviceptr)(uintptr_t)o->grad_output;
    CUdeviceptr scale = (CUdeviceptr)(uintptr_t)o->workspace, valid = 0;
    void *args[] = {&lab, &n, &ignore, &upstream, &scale, &valid};
    return launch_helper(h, fn, e->helper[0], 1, CE_HELPER_BLOCK, args, stream,
                         "the count of valid rows");
}

/* The reduced loss into o->total: the helper kernel launched after the
 * loss kernel, on the same stream, over the rows' losses the call wrote,
 * times the gradient's scale (mean: the count's, in the workspace). */
static int sum_rows(tuned_handle *h, const char *fn, const tuned__api_entry *e,
                    const float *loss, int64_t rows, const tuned_ce_options *o, void *stream)
{
    CUdeviceptr in = (CUdeviceptr)(uintptr_t)loss, out = (CUdeviceptr)(uintptr_t)o->total;
    CUdeviceptr scale = (CUdeviceptr)(uintptr_t)(o->reduction == TUNED_REDUCTION_MEAN
                                                      ? o->workspace
                                                      : (const void *)o->grad_output);
    long long n = rows;
    void *args[] = {&in, &n, &scale, &out};
    return launch_helper(h, fn, e->helper[2], 1, CE_HELPER_BLOCK, args, stream,
                         "the sum of the rows' losses");
}

/* Whether the options' device buffers (the per-row z terms and lse low
 * parts, the reduced loss, the error word, the workspace, the upstream
 * gradient) lie clear of the call's tensors: a kernel writes all but the
 * last, and an overlap would corrupt the logits or the loss silently. Said
 * as fn's error. */
static int aux_clear(const tuned_handle *h, const char *fn, const tuned__api_args *a,
                     const tuned_ce_options *o, int64_t rows, int64_t cols, int64_t stride,
                     tuned_dtype dtype)
{
    size_t esize = tuned_dtype_size(dtype);
    if (esize == 0 || rows < 1 || cols < 1 || stride < cols)
        return 0; /* the call's own check says what is wrong */
    const struct {
        const char *name;
        const void *p;
        uint64_t bytes;
    } aux[] = {
        {"z_out", o->z_out, (uint64_t)rows * 4},
        {"lse_lo", o->lse_lo, (uint64_t)rows * 4},
        {"total", o->total, 4},
        {"argmax", o->argmax, (uint64_t)rows * (o->labels_int32 ? 4u : 8u)},
        {"error", o->error, 4},
        {"workspace", o->reduction == TUNED_REDUCTION_MEAN ? o->workspace : NULL,
         TUNED_CE_WORKSPACE_BYTES},
        {"grad_output", o->grad_output,
         o->reduction == TUNED_REDUCTION_NONE ? (uint64_t)rows * 4 : 4},
    };
    for (size_t i = 0; i < sizeof aux / sizeof aux[0]; i++) {
        uintptr_t p = (uintptr_t)aux[i].p;
        if (p == 0)
            continue;
        for (unsigned t = 0; t < a->kind->ntensors; t++) {
            uintptr_t q = (uintptr_t)a->ptr[t];
            if (q == 0 || a->kind->tensor[t].role == TUNED__TENSOR_UNUSED)
                continue;
            uint64_t span = tuned__kind_span(a->kind, t, (uint64_t)rows, (uint64_t)cols,
                                             (uint64_t)stride, esize, a->flags);
            if (tuned__api_overlap(p, aux[i].bytes, q, span))
                return tuned__api_failf(h, TUNED_EINVAL, "%s: %s (%p) and %s (%p) overlap", fn,
                                        aux[i].name, aux[i].p, a->kind->tensor[t].name, a->ptr[t]);
        }
        /* the buffers a kernel writes (all but grad_output, the last) must
         * also lie clear of each other */
        for (size_t j = i + 1; j + 1 < sizeof aux / sizeof aux[0]; j++) {
            uintptr_t q = (uintptr_t)aux[j].p;
            if (q != 0 && tuned__api_overlap(p, aux[i].bytes, q, aux[j].bytes))
                return tuned__api_failf(h, TUNED_EINVAL, "%s: %s (%p) and %s (%p) overlap", fn,
                                        aux[i].name, aux[i].p, aux[j].name, aux[j].p);
        }
    }
    return 0;
}

/* One cross-entropy call of kind kernel: options, entry, count, launch,
 * reduced loss. */
static int ce_call(tuned_handle *h, const char *fn, tuned_kernel kernel, const void *const *ptrs,
                   const void *labels, int64_t rows, int64_t cols, int64_t row_stride,
                   tuned_dtype dtype, const tuned_ce_options *opt, void *stream)
{
    if (h == NULL)
        return tuned__api_failf(NULL, TUNED_EINVAL, "%s: the handle is NULL", fn);
    tuned_ce_options defaults;
    tuned_ce_options_init(&defaults);
    const tuned_ce_options *o = opt != NULL ? opt : &defaults;
    tuned__ce_params p;
    tuned__api_args a = {fn, tuned__kind((unsigned)kernel), {NULL}, &p, 0, 0};
    int rc = ce_slice(h, fn, o, cols, kernel == TUNED_KERNEL_CROSS_ENTROPY_BWD);
    if (rc == 0)
        rc = ce_params(h, fn, o, &p, &a.flags);
    if (rc != 0)
        return rc;
    for (unsigned i = 0; i < a.kind->ntensors; i++)
        a.ptr[i] = ptrs[i];
    if ((rc = aux_clear(h, fn, &a, o, rows, cols, row_stride, dtype)) != 0)
        return rc;
    tuned__api_entry *e;
    if ((rc = tuned__api_resolve(h, &a, rows, cols, row_stride, dtype, 1.0f, stream, &e)) != 0)
        return rc;
    if (o->reduction == TUNED_REDUCTION_MEAN &&
        (rc = count_rows(h, fn, e, labels, rows, o, stream)) != 0)
        return rc;
    if ((rc = tuned__api_launch(h, &a, e, rows, cols, row_stride, dtype, 1.0f, stream)) != 0)
        return rc;
    /* A forward's losses are its fourth tensor (tuned_cross_entropy). */
    if (o->total != NULL)
        rc = sum_rows(h, fn, e, (const float *)ptrs[3], rows, o, stream);
    return rc;
}

int tuned_cross_entropy(tuned_handle *h, const void *logits, const void *labels, void *grad,
                        float *loss, float *lse, int64_t rows, int64_t cols, int64_t row_stride,
                        tuned_dtype dtype, const tuned_ce_options *o, void *stream)
{
    const void *ptrs[] = {logits, labels, grad, loss, lse};
    return ce_call(h, "tuned_cross_entropy",
                   grad != NULL ? TUNED_KERNEL_CROSS_ENTROPY : TUNED_KERNEL_CROSS_ENTROPY_LOSS, ptrs,
                   labels, rows, cols, row_stride, dtype, o, stream);
}

int tuned_cross_entropy_backward(tuned_handle *h, const void *logits, const void *labels,
                                 const float *lse, void *grad, int64_t rows, int64_t cols,
                                 int64_t row_stride, tuned_dtype dtype,
                                 const tuned_ce_options *o, void *stream)
{
    const void *ptrs[] = {logits, labels, lse, grad};
    if (o != NULL && (o->argmax != NULL || o->total != NULL))
        return tuned__api_failf(h, TUNED_EINVAL,
                                "tuned_cross_entropy_backward: %s is the forward's "
                                "(tuned_cross_entropy); pass NULL",
                                o->argmax != NULL ? "argmax" : "total");
    return ce_call(h, "tuned_cross_entropy_backward", TUNED_KERNEL_CROSS_ENTROPY_BWD, ptrs, labels,
                   rows, cols, row_stride, dtype, o, stream);
}

int tuned_cross_entropy_rescale(tuned_handle *h, void *grad, int64_t rows, int64_t cols,
                                int64_t row_stride, tuned_dtype dtype, const float *factor,
                                void *stream)
{
    const char *fn = "tuned_cross_entropy_rescale";
    if (h == NULL)
        return tuned__api_failf(NULL, TUNED_EINVAL, "%s: the handle is NULL", fn);
    if (grad == NULL || factor == NULL)
        return tuned__api_failf(h, TUNED_EINVAL, "%s: %s is NULL", fn,
                                grad == NULL ? "grad" : "factor");
    /* Any fused entry of this key holds the helper: the forward's. */
    const tuned__api_entry *e = tuned__api_find_kind(h, TUNED_KERNEL_CROSS_ENTROPY, grad, rows,
                                                     cols, row_stride, dtype);
    if (e == NULL)
        return tuned__api_failf(h, TUNED_EINVAL,
                                "%s %lldx%lld %s: no tuned_cross_entropy call of this shape on "
                                "this handle and context yet",
                                fn, (long long)rows, (long long)cols, tuned_dtype_name(dtype));
    CUdeviceptr g = (CUdeviceptr)(uintptr_t)grad, f = (CUdeviceptr)(uintptr_t)factor;
    long long n = rows, stride = row_stride;
    int c = (int)cols;
    void *args[] = {&g, &n, &c, &stride, &f};
    /* A few blocks an SM, each walking rows (cross_entropy_aux.cu). */
    unsigned grid = rows < 2048 ? (unsigned)rows : 2048u;
    return launch_helper(h, fn, e->helper[1], grid, 256, args, stream, "the rescale");
}
