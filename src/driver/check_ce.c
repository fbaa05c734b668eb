/* check_ce.c: the cross-entropy kinds' float64 reference (TUNED__REF_
 * CROSS_ENTROPY), the check's third method beside the softmax family's two
 * in check.c: buffers for the per-row tensors, drawn labels (and the saved
 * log-sum-exp the backward reads), the options every run takes, and the
 * comparison of gradient, loss and lse with kernels/templates/
 * cross_entropy_reference.cu, itself checked here against a CPU float64
 * cross-entropy of a few rows before any variant is. A variant built with
 * compiled-in options (tuned__check_flags) runs with them: the softcap at
 * CE_SOFTCAP, the argmax written and checked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/cross_entropy.h"
#include "src/driver/check.h"

#define CE_IGNORE_INDEX (-100)
/* The check's z-loss: small, but not 0, so that the z path is computed. */
#define CE_Z_LOSS 1e-4f
/* The check's cap, for variants built with it: the drawn logits (|x| < 8)
 * reach tanh(1.6), well into its bend, and the planted rows' huge ones
 * saturate it; 1 / 5 is not exact in binary. */
#define CE_SOFTCAP 5.0f
/* The per-row counts the reference keeps: gradient, loss, lse, argmax. */
#define CE_CHECKS 4

#define CU(call, what) TUNED__CU_RETURN(c->d, call, what)

/* The kind's tensor called name, or -1. */
static int tensor(const tuned__check *c, const char *name)
{
    for (unsigned i = 0; i < c->kind->ntensors; i++)
        if (c->kind->tensor[i].role != TUNED__TENSOR_UNUSED &&
            strcmp(c->kind->tensor[i].name, name) == 0)
            return (int)i;
    return -1;
}

static CUdeviceptr tensor_ptr(const tuned__check *c, const char *name)
{
    int i = tensor(c, name);
    return i < 0 ? 0 : c->row_tensor[i];
}

/* Whether the kind writes a loss (a forward: the argmax is its). */
static bool writes_loss(const tuned__check *c)
{
    int i = tensor(c, "loss");
    return i >= 0 && c->kind->tensor[i].role == TUNED__TENSOR_OUT;
}

/* The options block every run takes, from the check's flags. */
static void ce_set_params(tuned__check *c)
{
    bool argmax = (c->flags & TUNED__CE_FLAG_ARGMAX) && writes_loss(c);
    tuned__ce_params p = {.scale = c->scale, .smoothing = 0.0f, .z_loss = CE_Z_LOSS,
                          .grad_per_row = 0, .ignore_index = CE_IGNORE_INDEX, .grad_scale = NULL,
                          .z_out = NULL, .error = (uint32_t *)(uintptr_t)c->error_word,
                          .argmax = argmax ? (void *)(uintptr_t)c->argmax : NULL,
                          .softcap = (c->flags & TUNED__CE_FLAG_SOFTCAP) ? CE_SOFTCAP : 0.0f};
    _Static_assert(sizeof p <= sizeof c->params, "the check holds the options block");
    memcpy(c->params, &p, sizeof p);
}

int tuned__check_ce_flags(tuned__check *c, unsigned flags, tuned__err *e)
{
    const unsigned allowed = TUNED__CE_FLAG_SOFTCAP | TUNED__CE_FLAG_ARGMAX;
    if ((flags & ~allowed) != 0)
        return tuned__errf(e, TUNED_EINVAL,
                           "check: %s: options 0x%x (the check runs the cap and the argmax; "
                           "its labels are int64 and it draws no smoothing)",
                           c->kind->name, flags);
    c->flags = flags;
    ce_set_params(c);
    return 0;
}

int tuned__check_ce_open(tuned__check *c, tuned__err *e)
{
    size_t bytes = 0;
    for (unsigned i = 0; i < c->kind->ntensors; i++)
        if (c->kind->tensor[i].role != TUNED__TENSOR_UNUSED &&
            c->kind->tensor[i].extent == TUNED__EXTENT_ROWS)
            bytes += (c->shape.rows * tuned__kind_elem_size(c->kind, i, c->esize) + 255) / 256 * 256;
    bytes += (c->shape.rows * 8 + 255) / 256 * 256; /* the argmax */
    bytes += 256; /* the error word */
    CUresult r = c->d->cuMemAlloc(&c->rows_alloc, bytes);
    if (r != CUDA_SUCCESS) {
        c->rows_alloc = 0;
        return tuned__cuda_check(c->d, r, e, "allocating the per-row tensors");
    }
    c->rows_alloc_bytes = bytes;
    CUdeviceptr at = c->rows_alloc;
    for (unsigned i = 0; i < c->kind->ntensors; i++)
        if (c->kind->tensor[i].role != TUNED__TENSOR_UNUSED &&
            c->kind->tensor[i].extent == TUNED__EXTENT_ROWS) {
            c->row_tensor[i] = at;
            at += (c->shape.rows * tuned__kind_elem_size(c->kind, i, c->esize) + 255) / 256 * 256;
        }
    c->argmax = at;
    at += (c->shape.rows * 8 + 255) / 256 * 256;
    c->error_word = at;
    ce_set_params(c);
    CU(c->d->cuModuleGetFunction(&c->ref_fn[0], c->module, "tuned_ce_check"),
       "finding tuned_ce_check");
    CU(c->d->cuModuleGetFunction(&c->ref_fn[1], c->module, "tuned_ce_gen_labels"),
       "finding tuned_ce_gen_labels");
    CU(c->d->cuModuleGetFunction(&c->ref_fn[2], c->module, "tuned_ce_gen_lse"),
       "finding tuned_ce_gen_lse");
    return 0;
}

int tuned__check_ce_input(tuned__check *c, unsigned long long seed, tuned__err *e)
{
    long long rows = (long long)c->shape.rows, stride = (long long)c->shape.cols;
    int cols = (int)c->shape.cols;
    long long ignore = CE_IGNORE_INDEX;
    CUdeviceptr labels = tensor_ptr(c, "labels");
    void *args[] = {&labels, &rows, &cols, &seed, &ignore};
    CU(c->d->cuLaunchKernel(c->ref_fn[1], (unsigned)((rows + 255) / 256 < 65535 ? (rows + 255) / 256 : 65535),
                            1, 1, 256, 1, 1, 0, c->stream, args, NULL),
       "launching the label generator");
    /* The backward's saved lse, if the kind reads one (an input). */
    int lse = tensor(c, "lse");
    if (lse >= 0 && c->kind->tensor[lse].role == TUNED__TENSOR_IN) {
        double scale = c->scale;
        double cap = ((const tuned__ce_params *)c->params)->softcap;
        CUdeviceptr out = c->row_tensor[lse];
        void *lse_args[] = {&c->x, &out, &rows, &cols, &stride, &scale, &cap};
        CU(c->d->cuLaunchKernel(c->ref_fn[2], (unsigned)(rows < 65535 ? rows : 65535), 1, 1, 256,
                                1, 1, 0, c->stream, lse_args, NULL),
           "launching the float64 lse of the backward's input");
    }
    CU(c->d->cuMemsetD32Async(c->error_word, 0, 1, c->stream), "clearing the error word");
    return 0;
}

int tuned__check_ce_poison(tuned__check *c, unsigned char poison, tuned__err *e)
{
    CU(c->d->cuMemsetD8Async(c->argmax, poison, c->shape.rows * 8, c->stream),
       "poisoning the argmax");
    for (unsigned i = 0; i < c->kind->ntensors; i++)
        if (c->kind->tensor[i].role == TUNED__TENSOR_OUT &&
            c->kind->tensor[i].extent == TUNED__EXTENT_ROWS)
            CU(c->d->cuMemsetD8Async(c->row_tensor[i], poison,
                                     c->shape.rows * tuned__kind_elem_size(c->kind, i, c->esize),
                                     c->stream),
               "poisoning a per-row output");
    return 0;
}

int tuned__check_ce_compare(tuned__check *c, uint64_t first_row, uint64_t nrows,
                            CUdeviceptr row_ref, uint64_t *bad, uint64_t *first, tuned__err *e)
{
    long long rows = (long long)nrows, stride = (long long)c->shape.cols;
    int cols = (int)c->shape.cols;
    CUdeviceptr at = first_row * c->shape.cols * c->esize;
    CUdeviceptr x = c->x + at;
    int g = tensor(c, "grad");
    CUdeviceptr grad = g >= 0 && c->kind->tensor[g].role == TUNED__TENSOR_OUT ? c->y + at : 0;
    CUdeviceptr labels = tensor_ptr(c, "labels") + first_row * 8;
    int li = tensor(c, "loss"), si = tensor(c, "lse");
    CUdeviceptr loss = li >= 0 ? c->row_tensor[li] + first_row * 4 : 0;
    CUdeviceptr lse = si >= 0 && c->kind->tensor[si].role == TUNED__TENSOR_OUT
                          ? c->row_tensor[si] + first_row * 4
                          : 0;
    /* The backward's saved lse: its gradient's reference is formed from it. */
    CUdeviceptr lse_in = si >= 0 && c->kind->tensor[si].role == TUNED__TENSOR_IN
                             ? c->row_tensor[si] + first_row * 4
                             : 0;
    const tuned__ce_params *p = (const tuned__ce_params *)c->params;
    double scale = p->scale, eps = p->smoothing, z = p->z_loss, cap = p->softcap;
    long long ignore = p->ignore_index;
    CUdeviceptr grad_scale = 0;
    CUdeviceptr argmax = p->argmax != NULL ? c->argmax + first_row * 8 : 0;
    int per_row = 0;
    CUdeviceptr counts = c->counters, firsts = c->counters + 8 * CE_CHECKS;
    CU(c->d->cuMemsetD32Async(counts, 0, 2 * CE_CHECKS, c->stream), "clearing the check counters");
    CU(c->d->cuMemsetD32Async(firsts, 0xFFFFFFFFu, 2 * CE_CHECKS, c->stream),
       "clearing the check counters");
    void *args[] = {&x,     &labels,     &grad,    &loss,   &lse,    &rows,
                    &cols,  &stride,     &scale,   &eps,    &z,      &ignore,
                    &grad_scale, &per_row, &c->rtol, &c->atol, &counts, &firsts, &row_ref,
                    &lse_in, &cap, &argmax};
    CU(c->d->cuLaunchKernel(c->ref_fn[0], (unsigned)(nrows < 65535 ? nrows : 65535), 1, 1, 256, 1,
                            1, 0, c->stream, args, NULL),
       "launching the cross-entropy reference check");
    uint64_t host[2 * CE_CHECKS];
    _Static_assert(sizeof host <= 64, "the check's counters hold 64 bytes");
    CU(c->d->cuStreamSynchronize(c->stream), "running the cross-entropy reference check");
    CU(c->d->cuMemcpyDtoH(host, c->counters, sizeof host), "reading the check counters");
    *bad = host[0] + host[1] + host[2] + host[3];
    /* the first wrong gradient element, else the first wrong row's first element */
    uint64_t row = host[5] < host[6] ? host[5] : host[6];
    row = host[7] < row ? host[7] : row;
    *first = host[0] != 0 ? host[4] : row * (uint64_t)c->shape.cols;
    return 0;
}

/* Logit i of a row as the softmax sees it: capped when cap is not 0
 * (-inf kept). */
static double cpu_c(const unsigned char *row, uint64_t i, tuned_dtype dtype, size_t esize,
                    double cap)
{
    double x = tuned__check_bits_to_double(row + i * esize, dtype);
    return cap == 0.0 || x == -INFINITY ? x : cap * tanh(x / cap);
}

/* The float64 cross-entropy of one row on the CPU: lse of s x (s c) and
 * the loss of label y (0 when ignored). */
static void cpu_ce_row(const unsigned char *row, uint64_t cols, tuned_dtype dtype, size_t esize,
                       double scale, double z, double cap, long long label, double *lse,
                       double *loss)
{
    double m = -INFINITY, s = 0.0;
    for (uint64_t i = 0; i < cols; i++)
        m = fmax(m, scale * cpu_c(row, i, dtype, esize, cap));
    for (uint64_t i = 0; i < cols; i++)
        s += exp(scale * cpu_c(row, i, dtype, esize, cap) - m);
    *lse = m == -INFINITY ? m : m + log(s);
    if (label == CE_IGNORE_INDEX) {
        *loss = 0.0;
        return;
    }
    double xy = scale * cpu_c(row, (uint64_t)label, dtype, esize, cap);
    *loss = (*lse - xy) + z * *lse * *lse;
}

int tuned__check_ce_reference(tuned__check *c, const uint64_t *picks, size_t npicks,
                              tuned__err *e)
{
    size_t row_bytes = c->shape.cols * c->esize;
    unsigned char *row = malloc(row_bytes);
    if (row == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory for a %zu-byte row", row_bytes);
    const tuned__ce_params *p = (const tuned__ce_params *)c->params;
    int rc = 0;
    for (size_t i = 0; i < npicks && rc == 0; i++) {
        uint64_t r = picks[i];
        uint64_t bad, first;
        long long label = 0;
        double ref[2], lse, loss;
        if ((rc = tuned__check_ce_compare(c, r, 1, c->stats, &bad, &first, e)) != 0)
            break;
        CUresult cr = c->d->cuMemcpyDtoH(row, c->x + r * row_bytes, row_bytes);
        if (cr == CUDA_SUCCESS)
            cr = c->d->cuMemcpyDtoH(&label, tensor_ptr(c, "labels") + r * 8, 8);
        if (cr == CUDA_SUCCESS)
            cr = c->d->cuMemcpyDtoH(ref, c->stats, sizeof ref);
        if (cr != CUDA_SUCCESS) {
            rc = tuned__cuda_check(c->d, cr, e, "reading a row for the reference check");
            break;
        }
        cpu_ce_row(row, c->shape.cols, c->shape.dtype, c->esize, p->scale, p->z_loss, p->softcap,
                   label, &lse, &loss);
        if (!tuned__check_stats_agree(loss, ref[0]) || !tuned__check_stats_agree(lse, ref[1]))
            rc = tuned__errf(e, TUNED_EWRONG,
                             "check: the GPU float64 cross-entropy disagrees with the CPU on row "
                             "%llu: loss %.17g vs %.17g, lse %.17g vs %.17g",
                             (unsigned long long)r, ref[0], loss, ref[1], lse);
    }
    free(row);
    return rc;
}

/* What a wrong element looked like, for the check's message: the logit,
 * label and lse of its row, the kernel's gradient there against a float64
 * one formed on the CPU as the reference kernel forms it (from the saved
 * lse where the kind reads one), and the row's loss and lse outputs
 * against the CPU's. A failure to read leaves out what it could not. */
void tuned__check_ce_describe(tuned__check *c, uint64_t first, char *out, size_t n)
{
    if (out == NULL || n == 0)
        return;
    out[0] = '\0';
    uint64_t cols = c->shape.cols, r = first / cols, j = first % cols;
    size_t es = c->esize;
    unsigned char *row = malloc(cols * es);
    if (row == NULL)
        return;
    long long label = 0;
    if (c->d->cuMemcpyDtoH(row, c->x + r * cols * es, cols * es) != CUDA_SUCCESS ||
        c->d->cuMemcpyDtoH(&label, tensor_ptr(c, "labels") + r * 8, 8) != CUDA_SUCCESS) {
        free(row);
        return;
    }
    const tuned__ce_params *p = (const tuned__ce_params *)c->params;
    double lse, loss;
    cpu_ce_row(row, cols, c->shape.dtype, es, p->scale, p->z_loss, p->softcap, label, &lse,
               &loss);
    double xj = tuned__check_bits_to_double(row + j * es, c->shape.dtype);
    double cj = cpu_c(row, j, c->shape.dtype, es, p->softcap);
    double tj = p->softcap != 0.0f ? cj / p->softcap : 0.0;
    double slope = xj == -INFINITY && p->softcap != 0.0f ? 0.0 : 1.0 - tj * tj;
    free(row);
    int si = tensor(c, "lse"), li = tensor(c, "loss"), gi = tensor(c, "grad");
    bool saved = si >= 0 && c->kind->tensor[si].role == TUNED__TENSOR_IN;
    float lse_in = 0.0f, lse_out = NAN, loss_out = NAN;
    if (saved)
        (void)c->d->cuMemcpyDtoH(&lse_in, c->row_tensor[si] + r * 4, 4);
    else if (si >= 0)
        (void)c->d->cuMemcpyDtoH(&lse_out, c->row_tensor[si] + r * 4, 4);
    if (li >= 0)
        (void)c->d->cuMemcpyDtoH(&loss_out, c->row_tensor[li] + r * 4, 4);
    double lse_g = saved ? (double)lse_in : lse;
    /* at most 1 from a saved lse, as the reference and the kernel take it */
    double s = p->scale, d = s * cj - lse_g, prob = exp(saved && d > 0.0 ? 0.0 : d);
    double ref = label == CE_IGNORE_INDEX
                     ? 0.0
                     : s * (prob * (1.0 + 2.0 * p->z_loss * lse_g) - ((long long)j == label)) *
                           slope;
    int used = snprintf(out, n, "; there: logit %.9g, label %lld, lse %.9g (%s), p %.3g", xj,
                        label, lse_g, saved ? "the saved one" : "float64", prob);
    if (gi >= 0 && c->kind->tensor[gi].role == TUNED__TENSOR_OUT && used > 0 && (size_t)used < n) {
        unsigned char got[8] = {0};
        if (c->d->cuMemcpyDtoH(got, c->y + first * es, es) == CUDA_SUCCESS)
            used += snprintf(out + used, n - (size_t)used, ", gradient %.9g against float64 %.9g",
                             tuned__check_bits_to_double(got, c->shape.dtype), ref);
    }
    if (li >= 0 && used > 0 && (size_t)used < n)
        used += snprintf(out + used, n - (size_t)used, ", row loss %.9g against %.9g",
                         (double)loss_out, loss);
    if (!saved && si >= 0 && used > 0 && (size_t)used < n)
        snprintf(out + used, n - (size_t)used, ", row lse %.9g against %.9g", (double)lse_out,
                 lse);
}
