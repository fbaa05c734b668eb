/* check.c: one variant run once on generated input and compared with the
 * float64 reference (check.h); the evaluator and the embedding API both
 * check through here. */
#include "src/driver/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/source.h"
#include "src/driver/module.h"
#include "tuned.h"

#define REFERENCE_ROWS_CHECKED 8
#define CHECK_ROW_BLOCK 256 /* the most rows a block of any variant holds */

#define CU(call, what) TUNED__CU_RETURN(c->d, call, what)

/* ---- host-side float64 reference, used to check the GPU reference ---- */

static double half_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0)
        v = ldexp(mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp(mant | 0x400, exp - 25);
    return sign ? -v : v;
}

double tuned__check_bits_to_double(const unsigned char *p, tuned_dtype dtype)
{
    uint16_t h;
    uint32_t w;
    float f;
    switch (dtype) {
    case TUNED_FP16:
        memcpy(&h, p, 2);
        return half_to_double(h);
    case TUNED_BF16:
        memcpy(&h, p, 2);
        w = (uint32_t)h << 16;
        memcpy(&f, &w, 4);
        return f;
    case TUNED_FP32:
        memcpy(&f, p, 4);
        return f;
    }
    return NAN;
}

void tuned__check_double_to_bits(double v, tuned_dtype dtype, unsigned char *out)
{
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (dtype == TUNED_FP32) {
        memcpy(out, &f, 4);
    } else if (dtype == TUNED_BF16) {
        uint16_t b = (uint16_t)(bits >> 16); /* exact: the value needs 8 bits at most */
        memcpy(out, &b, 2);
    } else {
        uint16_t b = (uint16_t)((bits >> 16) & 0x8000u);
        double a = fabs(v);
        if (a > 0) {
            int ex;
            double m = frexp(a, &ex); /* a = m 2^ex, m in [0.5, 1) */
            b |= (uint16_t)((ex - 1 + 15) << 10);
            b |= (uint16_t)lround((m * 2 - 1) * 1024);
        }
        memcpy(out, &b, 2);
    }
}

/* Max (ignoring NaN, as fmax) of scale x and sum of exp(scale x - max) of
 * one row. */
static void cpu_row_stats(const unsigned char *row, uint64_t cols, tuned_dtype dtype, size_t esize,
                          double scale, double *max, double *sum)
{
    double m = -INFINITY, s = 0.0;
    for (uint64_t i = 0; i < cols; i++)
        m = fmax(m, scale * tuned__check_bits_to_double(row + i * esize, dtype));
    for (uint64_t i = 0; i < cols; i++)
        s += exp(scale * tuned__check_bits_to_double(row + i * esize, dtype) - m);
    *max = m;
    *sum = s;
}

/* A backward row's sum of dy y (log: of dy) and of the terms' magnitudes. */
static void cpu_row_sums(const unsigned char *y, const unsigned char *dy, uint64_t cols,
                         tuned_dtype dtype, size_t esize, bool log, double *sum, double *mag)
{
    double s = 0.0, m = 0.0;
    for (uint64_t i = 0; i < cols; i++) {
        double g = tuned__check_bits_to_double(dy + i * esize, dtype);
        double t = log ? g : g * tuned__check_bits_to_double(y + i * esize, dtype);
        s += t;
        m += fabs(t);
    }
    *sum = s;
    *mag = m;
}

bool tuned__check_stats_agree(double cpu, double gpu)
{
    if (isnan(cpu) || isnan(gpu))
        return isnan(cpu) && isnan(gpu);
    if (isinf(cpu) || isinf(gpu))
        return cpu == gpu;
    return fabs(cpu - gpu) <= 1e-9 * fmax(1.0, fabs(cpu));
}

static unsigned grid_for(uint64_t n, unsigned per_block, unsigned cap)
{
    uint64_t g = (n + per_block - 1) / per_block;
    return (unsigned)(g < 1 ? 1 : g > cap ? cap : g);
}

static void tolerances(tuned_dtype dtype, double *rtol, double *atol)
{
    switch (dtype) {
    case TUNED_FP16: *rtol = 1.5e-3, *atol = 1e-7; break;  /* 1 ulp of fp16 and a little */
    case TUNED_BF16: *rtol = 8e-3, *atol = 1e-36; break;   /* 1 ulp of bf16 */
    case TUNED_FP32: *rtol = 2e-5, *atol = 1e-36; break;   /* ex2.approx and the fp32 sum */
    }
}

/* ---- open / close ---- */

static int alloc(tuned__check *c, CUdeviceptr *p, size_t bytes, const char *what, tuned__err *e)
{
    CUresult r = c->d->cuMemAlloc(p, bytes);
    if (r != CUDA_SUCCESS) {
        char context[128];
        snprintf(context, sizeof context, "allocating %zu MiB for %s", bytes >> 20, what);
        return tuned__cuda_check(c->d, r, e, context);
    }
    return 0;
}

static int open_module(tuned__check *c, const tuned__nvrtc *n, int arch, tuned__err *e)
{
    char *src = NULL;
    int rc = tuned__source_reference(c->kind, c->shape.dtype, &src, e);
    if (rc != 0)
        return rc;
    rc = tuned__module_from_source(c->d, n, src, "reference", arch, "the reference kernels",
                                   &c->module, e);
    free(src);
    if (rc != 0)
        return rc;
    CU(c->d->cuModuleGetFunction(&c->gen, c->module, "tuned_gen_input"), "finding tuned_gen_input");
    CU(c->d->cuModuleGetFunction(&c->check, c->module, "tuned_check"), "finding tuned_check");
    CU(c->d->cuModuleGetFunction(&c->gen_grad, c->module, "tuned_gen_grad"),
       "finding tuned_gen_grad");
    CU(c->d->cuModuleGetFunction(&c->gen_probs, c->module, "tuned_gen_probs"),
       "finding tuned_gen_probs");
    CU(c->d->cuModuleGetFunction(&c->check_bwd, c->module, "tuned_check_bwd"),
       "finding tuned_check_bwd");
    return 0;
}

static int open_buffers(tuned__check *c, size_t x_offset, size_t y_offset, tuned__err *e)
{
    int rc;
    c->x_alloc_bytes = c->bytes + x_offset * c->esize;
    c->front_bytes = TUNED__CHECK_GUARD_BYTES + y_offset * c->esize;
    c->y_alloc_bytes = c->front_bytes + c->bytes + TUNED__CHECK_GUARD_BYTES;
    if ((rc = alloc(c, &c->x_alloc, c->x_alloc_bytes, "the input", e)) ||
        (rc = alloc(c, &c->y_alloc, c->y_alloc_bytes, "the output", e)) ||
        (rc = alloc(c, &c->counters, 64, "the check counters", e)) ||
        (rc = alloc(c, &c->stats, 2 * sizeof(double), "row statistics", e)))
        return rc;
    if (c->kind->reference == TUNED__REF_BACKWARD) {
        /* Rows that are not aligned anyway: dy one element further in than
         * y, so that their offsets inside a vector differ and dy takes the
         * per-element path (softmax_bwd.cu). */
        bool unaligned = (x_offset * c->esize) % 16 != 0 || (y_offset * c->esize) % 16 != 0;
        size_t x2_offset = unaligned ? x_offset + 1 : x_offset;
        c->x2_alloc_bytes = c->bytes + x2_offset * c->esize;
        if ((rc = alloc(c, &c->x2_alloc, c->x2_alloc_bytes, "the second input (dy)", e)) != 0)
            return rc;
        c->x2 = c->x2_alloc + x2_offset * c->esize;
    }
    c->x = c->x_alloc + x_offset * c->esize;
    /* The front guard is a multiple of 256 bytes before the offset, so y
     * keeps the alignment y_offset gives it. */
    c->y = c->y_alloc + c->front_bytes;
    c->guard_host = malloc(c->front_bytes);
    if (c->guard_host == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory");
    return 0;
}

int tuned__check_open(tuned__check *c, const tuned__driver *d, const tuned__nvrtc *n, int arch,
                      const tuned__shape *s, size_t x_offset, size_t y_offset, CUstream stream,
                      tuned__err *e)
{
    memset(c, 0, sizeof *c);
    c->d = d;
    c->shape = *s;
    c->esize = tuned_dtype_size(s->dtype);
    if (c->esize == 0 || s->rows < 1 || s->cols < 1 || s->cols > 0x7fffff00u ||
        s->rows > (SIZE_MAX / 4) / s->cols / c->esize)
        return tuned__errf(e, TUNED_EINVAL, "check: bad shape %llux%llu",
                           (unsigned long long)s->rows, (unsigned long long)s->cols);
    c->bytes = s->rows * s->cols * c->esize;
    c->kind = tuned__shape_spec(s);
    if (c->kind == NULL)
        return tuned__errf(e, TUNED_EINVAL, "check: unknown kernel %u", tuned__shape_kernel(s));
    c->scale = TUNED__CHECK_SCALE;
    memcpy(c->params, &c->scale, sizeof c->scale);
    c->stream = stream;
    c->seed = 0x5eed0000u;
    tolerances(s->dtype, &c->rtol, &c->atol);
    int rc = open_buffers(c, x_offset, y_offset, e);
    if (rc == 0)
        rc = open_module(c, n, arch, e);
    if (rc == 0 && c->kind->reference == TUNED__REF_CROSS_ENTROPY)
        rc = tuned__check_ce_open(c, e);
    if (rc == 0 && (c->kind->reference == TUNED__REF_ROUTER ||
                    c->kind->reference == TUNED__REF_ROUTER_BWD))
        rc = tuned__check_router_open(c, e);
    if (rc != 0)
        tuned__check_close(c);
    return rc;
}

int tuned__check_flags(tuned__check *c, unsigned flags, tuned__err *e)
{
    if (c->kind->reference == TUNED__REF_CROSS_ENTROPY)
        return tuned__check_ce_flags(c, flags, e);
    if (c->kind->reference == TUNED__REF_ROUTER || c->kind->reference == TUNED__REF_ROUTER_BWD)
        return tuned__check_router_flags(c, flags, e);
    if (flags != 0)
        return tuned__errf(e, TUNED_EINVAL, "check: %s: no compiled-in options to run (0x%x)",
                           c->kind->name, flags);
    return 0;
}

void tuned__check_close(tuned__check *c)
{
    if (c->d == NULL)
        return;
    if (c->module != NULL)
        c->d->cuModuleUnload(c->module);
    tuned__check_router_close(c);
    CUdeviceptr bufs[] = {c->x_alloc, c->y_alloc, c->x2_alloc, c->counters, c->stats,
                          c->rows_alloc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i] != 0)
            c->d->cuMemFree(bufs[i]);
    free(c->guard_host);
    memset(c, 0, sizeof *c);
}

/* ---- input, reference, comparison ---- */

int tuned__check_input(tuned__check *c, tuned__err *e)
{
    long long rows = (long long)c->shape.rows, stride = (long long)c->shape.cols;
    int cols = (int)c->shape.cols;
    unsigned long long seed = c->seed++;
    bool backward = c->kind->reference == TUNED__REF_BACKWARD;
    /* A backward kernel's x is only the source of its y: it goes where the
     * output will be (poisoned before each run anyway). */
    CUdeviceptr x = backward ? c->y : c->x;
    void *args[] = {&x, &rows, &cols, &stride, &seed};
    unsigned grid = grid_for(c->shape.rows * c->shape.cols, 256, 65535);
    CU(c->d->cuLaunchKernel(c->gen, grid, 1, 1, 256, 1, 1, 0, c->stream, args, NULL),
       "launching the input generator");
    if (c->kind->reference == TUNED__REF_CROSS_ENTROPY)
        return tuned__check_ce_input(c, seed, e);
    if (c->kind->reference == TUNED__REF_ROUTER || c->kind->reference == TUNED__REF_ROUTER_BWD)
        return tuned__check_router_input(c, seed, e);
    if (!backward)
        return 0;
    int log = c->kind->define_log;
    void *probs_args[] = {&x, &c->x, &rows, &cols, &stride, &log};
    CU(c->d->cuLaunchKernel(c->gen_probs, grid_for(c->shape.rows, 1, 65535), 1, 1, 256, 1, 1, 0,
                            c->stream, probs_args, NULL),
       "launching the float64 softmax of the backward input");
    void *grad_args[] = {&c->x2, &rows, &cols, &stride, &seed};
    CU(c->d->cuLaunchKernel(c->gen_grad, grid, 1, 1, 256, 1, 1, 0, c->stream, grad_args, NULL),
       "launching the gradient generator");
    return 0;
}

/* Runs the reference check of nrows rows of y from row first_row; *bad
 * and *first get the count and the first wrong element (counted from
 * first_row). row_stats may be 0 (not wanted), else it gets the rows'
 * (max, sum) pairs. */
static int compare_rows(tuned__check *c, uint64_t first_row, uint64_t nrows,
                        CUdeviceptr row_stats, uint64_t *bad, uint64_t *first, tuned__err *e)
{
    if (c->kind->reference == TUNED__REF_CROSS_ENTROPY)
        return tuned__check_ce_compare(c, first_row, nrows, row_stats, bad, first, e);
    long long rows = (long long)nrows, stride = (long long)c->shape.cols;
    int cols = (int)c->shape.cols;
    CUdeviceptr at = first_row * c->shape.cols * c->esize;
    CUdeviceptr x = c->x + at, x2 = c->x2 != 0 ? c->x2 + at : 0, y = c->y + at;
    CUdeviceptr bad_ptr = c->counters, first_ptr = c->counters + 8;
    CU(c->d->cuMemsetD32Async(c->counters, 0, 2, c->stream), "clearing the check counters");
    CU(c->d->cuMemsetD32Async(first_ptr, 0xFFFFFFFFu, 2, c->stream),
       "clearing the check counters");
    unsigned grid = grid_for(nrows, 1, 65535);
    int log = c->kind->define_log;
    if (c->kind->reference == TUNED__REF_BACKWARD) {
        void *args[] = {&x, &x2, &y, &rows, &cols, &stride, &c->rtol, &c->atol,
                        &bad_ptr, &first_ptr, &row_stats, &log};
        CU(c->d->cuLaunchKernel(c->check_bwd, grid, 1, 1, 256, 1, 1, 0, c->stream, args, NULL),
           "launching the reference check");
    } else {
        double scale = c->scale;
        void *args[] = {&x, &y, &rows, &cols, &stride, &c->rtol, &c->atol,
                        &bad_ptr, &first_ptr, &row_stats, &scale, &log};
        CU(c->d->cuLaunchKernel(c->check, grid, 1, 1, 256, 1, 1, 0, c->stream, args, NULL),
           "launching the reference check");
    }
    uint64_t host[2];
    CU(c->d->cuStreamSynchronize(c->stream), "running the reference check");
    CU(c->d->cuMemcpyDtoH(host, c->counters, sizeof host), "reading the check counters");
    *bad = host[0];
    *first = host[1];
    return 0;
}

int tuned__check_reference(tuned__check *c, tuned__err *e)
{
    int rc = tuned__check_input(c, e);
    if (rc != 0)
        return rc;
    uint64_t rows = c->shape.rows, cols = c->shape.cols;
    /* The generator's special rows (reference.cu) among them. */
    uint64_t picks[REFERENCE_ROWS_CHECKED] = {0,        1,           rows / 3,     rows / 2,
                                              rows - 1, rows / 2 + 1, rows / 2 + 2, (rows * 3) / 4};
    for (size_t i = 0; i < REFERENCE_ROWS_CHECKED; i++)
        picks[i] = picks[i] < rows ? picks[i] : rows - 1;
    if (c->kind->reference == TUNED__REF_CROSS_ENTROPY)
        return tuned__check_ce_reference(c, picks, REFERENCE_ROWS_CHECKED, e);
    /* The router's reference is the host's (router_reference.c, unit-tested). */
    if (c->kind->reference == TUNED__REF_ROUTER || c->kind->reference == TUNED__REF_ROUTER_BWD)
        return 0;
    size_t row_bytes = cols * c->esize;
    bool backward = c->kind->reference == TUNED__REF_BACKWARD;
    unsigned char *row = malloc(2 * row_bytes);
    if (row == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory for a %zu-byte row", row_bytes);
    unsigned char *row2 = row + row_bytes; /* dy, backward kernels only */
    for (size_t i = 0; i < REFERENCE_ROWS_CHECKED; i++) {
        uint64_t r = picks[i] < rows ? picks[i] : rows - 1;
        double gpu_stats[2], m, s;
        /* The reference's statistics of this row alone. */
        uint64_t bad, first;
        if ((rc = compare_rows(c, r, 1, c->stats, &bad, &first, e)) != 0) {
            free(row);
            return rc;
        }
        CUresult cr = c->d->cuMemcpyDtoH(row, c->x + r * row_bytes, row_bytes);
        if (cr == CUDA_SUCCESS && backward)
            cr = c->d->cuMemcpyDtoH(row2, c->x2 + r * row_bytes, row_bytes);
        if (cr == CUDA_SUCCESS)
            cr = c->d->cuMemcpyDtoH(gpu_stats, c->stats, sizeof gpu_stats);
        if (cr != CUDA_SUCCESS) {
            free(row);
            return tuned__cuda_check(c->d, cr, e, "reading a row for the reference check");
        }
        if (backward)
            cpu_row_sums(row, row2, cols, c->shape.dtype, c->esize, c->kind->define_log,
                         &m, &s);
        else
            cpu_row_stats(row, cols, c->shape.dtype, c->esize, c->scale, &m, &s);
        if (!tuned__check_stats_agree(m, gpu_stats[0]) || !tuned__check_stats_agree(s, gpu_stats[1])) {
            free(row);
            return tuned__errf(e, TUNED_EWRONG,
                               "check: the GPU float64 reference disagrees with the CPU on "
                               "row %llu: %s %.17g vs %.17g, %s %.17g vs %.17g",
                               (unsigned long long)r, backward ? "sum" : "max", gpu_stats[0], m,
                               backward ? "magnitude" : "sum", gpu_stats[1], s);
        }
    }
    free(row);
    return 0;
}

/* Whether both guards still hold poison: a variant that writes outside its
 * output is wrong even when every element of it is right. */
static int guards_intact(tuned__check *c, unsigned char poison, bool *wrong, char *detail,
                         size_t n, tuned__err *e)
{
    CU(c->d->cuMemcpyDtoH(c->guard_host, c->y_alloc, c->front_bytes),
       "reading the guard before the output");
    for (size_t i = c->front_bytes; i-- > 0;) {
        if (c->guard_host[i] != poison) {
            *wrong = true;
            if (detail != NULL)
                snprintf(detail, n, "stray write %zu bytes before the start of the output",
                         c->front_bytes - i);
            return 0;
        }
    }
    CU(c->d->cuMemcpyDtoH(c->guard_host, c->y + c->bytes, TUNED__CHECK_GUARD_BYTES),
       "reading the guard after the output");
    for (size_t i = 0; i < TUNED__CHECK_GUARD_BYTES; i++) {
        if (c->guard_host[i] != poison) {
            *wrong = true;
            if (detail != NULL)
                snprintf(detail, n, "stray write %zu bytes past the end of the output", i);
            return 0;
        }
    }
    return 0;
}

/* The test hook that proves the guards are read: one byte outside (or
 * inside) the output overwritten as a stray store of the variant would. */
static int plant_stray_write(tuned__check *c, unsigned char poison, tuned__err *e)
{
#ifdef TUNED_TEST_HOOKS
    if (c->stray_write != 0)
        CU(c->d->cuMemsetD8Async(c->y + (CUdeviceptr)c->stray_write, (unsigned char)~poison, 1,
                                 c->stream),
           "planting a stray write");
#else
    (void)poison;
    if (c->stray_write != 0)
        return tuned__errf(e, TUNED_EUNSUPPORTED,
                           "check: stray writes are a test hook, not in this build");
#endif
    return 0;
}

void tuned__check_tensors(const tuned__check *c, CUdeviceptr *tensors)
{
    /* The kind's row-tensor inputs take x, then x2; its row-tensor output
     * takes y; per-row tensors their own buffers; unused ones NULL, and
     * optional ones unless the key says its calls pass them. */
    unsigned inputs = 0;
    for (unsigned i = 0; i < c->kind->ntensors; i++) {
        const tuned__tensor_spec *t = &c->kind->tensor[i];
        if (!tuned__tensor_timed(c->kind, i, c->shape.params))
            tensors[i] = 0;
        else if (t->extent != TUNED__EXTENT_MATRIX)
            tensors[i] = c->row_tensor[i];
        else
            tensors[i] = t->role == TUNED__TENSOR_OUT ? c->y : inputs++ == 0 ? c->x : c->x2;
    }
}

int tuned__check_run(tuned__check *c, const tuned__launch *l, tuned__workspace *work,
                     unsigned char poison, bool *wrong, char *detail, size_t n, tuned__err *e)
{
    *wrong = false;
    if (detail != NULL && n > 0)
        detail[0] = '\0';
    int rc;
    if (c->kind->reference == TUNED__REF_ROUTER || c->kind->reference == TUNED__REF_ROUTER_BWD) {
        rc = tuned__check_router_run(c, l, work, poison, wrong, detail, n, e);
        if (rc != 0 || *wrong || c->kind->reference == TUNED__REF_ROUTER)
            return rc;
        return guards_intact(c, poison, wrong, detail, n, e);
    }
    CU(c->d->cuMemsetD8Async(c->y_alloc, poison, c->y_alloc_bytes, c->stream),
       "poisoning the output");
    if (c->kind->reference == TUNED__REF_CROSS_ENTROPY &&
        (rc = tuned__check_ce_poison(c, poison, e)) != 0)
        return rc;
    CUdeviceptr tensors[TUNED__KIND_MAX_TENSORS];
    tuned__check_tensors(c, tensors);
    CU(tuned__launch_run(c->d, l, work, tensors, (long long)c->shape.rows,
                         (int)c->shape.cols, (long long)c->shape.cols, c->params, c->stream),
       l->cooperative ? "launching the variant (cooperative)" : "launching the variant");
    if ((rc = plant_stray_write(c, poison, e)) != 0)
        return rc;
    uint64_t bad, first;
    if ((rc = compare_rows(c, 0, c->shape.rows, 0, &bad, &first, e)) != 0)
        return rc;
    uint64_t cols = c->shape.cols;
    if (bad != 0) {
        *wrong = true;
        char there[320] = "";
        if (detail != NULL && c->kind->reference == TUNED__REF_CROSS_ENTROPY)
            tuned__check_ce_describe(c, first, there, sizeof there);
        if (detail != NULL)
            snprintf(detail, n,
                     "%llu of %llu elements wrong (first at row %llu, column %llu; output "
                     "poisoned with 0x%02x)%s",
                     (unsigned long long)bad, (unsigned long long)(c->shape.rows * cols),
                     (unsigned long long)(first / cols), (unsigned long long)(first % cols),
                     poison, there);
        return 0;
    }
    return guards_intact(c, poison, wrong, detail, n, e);
}

/* ---- the whole check, for the embedding API ---- */

/* The rows to check s on: all of them when x, y and the statistics take at
 * most half the free memory, else fewer (see check.h). */
static uint64_t rows_to_check(const tuned__driver *d, const tuned__shape *s)
{
    size_t freemem = 0, total = 0;
    if (d->cuMemGetInfo(&freemem, &total) != CUDA_SUCCESS)
        return s->rows;
    uint64_t per_row = (uint64_t)tuned__kind_bytes(tuned__shape_spec(s), 1, tuned__wire_cols_of(s),
                                                  tuned_dtype_size(s->dtype));
    uint64_t budget = freemem / 2;
    uint64_t fit = budget > 2 * TUNED__CHECK_GUARD_BYTES
                       ? (budget - 2 * TUNED__CHECK_GUARD_BYTES) / per_row
                       : 0;
    if (fit >= s->rows)
        return s->rows;
    uint64_t tail = s->rows % CHECK_ROW_BLOCK;
    uint64_t body = fit > tail ? (fit - tail) / CHECK_ROW_BLOCK * CHECK_ROW_BLOCK : 0;
    /* tail 0 and nothing fits: one block's worth, the least that shows it. */
    return body + tail > 0 ? body + tail : CHECK_ROW_BLOCK;
}

int tuned__check_variant(const tuned__driver *d, const tuned__nvrtc *n, int arch, int sm_count,
                         CUfunction fn, const tuned__config *cfg, const tuned__shape *s,
                         bool aligned, bool *ok, char *detail, size_t dn, tuned__err *e)
{
    *ok = false;
    if (detail != NULL && dn > 0)
        detail[0] = '\0';
    tuned__shape cs = *s;
    cs.rows = rows_to_check(d, s);
    /* An unaligned variant is checked on rows that are not 16-byte aligned:
     * one element into x and three into y, as the alignment tests do. */
    size_t x_off = aligned ? 0 : 1, y_off = aligned ? 0 : 3;
    CUstream stream = NULL;
    int rc = tuned__cuda_check(d, d->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), e,
                               "creating the check's stream");
    if (rc != 0)
        return rc;
    tuned__check c;
    tuned__workspace work;
    memset(&work, 0, sizeof work);
    rc = tuned__check_open(&c, d, n, arch, &cs, x_off, y_off, stream, e);
    if (rc == 0) {
        tuned__err refused = {0};
        tuned__launch l;
        /* A launch the driver refuses is the variant's failure, as in the
         * evaluator. */
        int lrc = tuned__launch_prepare(d, fn, cfg, &cs, sm_count, &l, &refused);
        if (lrc == 0 && l.work_bytes > 0)
            rc = tuned__workspace_alloc(d, &work, l.work_bytes, e);
        if (lrc != 0) {
            if (detail != NULL)
                snprintf(detail, dn, "the launch is refused: %s", refused.msg);
        } else if (rc == 0 && (rc = tuned__check_reference(&c, e)) == 0) {
            bool wrong = false;
            rc = tuned__check_run(&c, &l, &work, 0x7B, &wrong, detail, dn, e);
            *ok = rc == 0 && !wrong;
        }
        d->cuStreamSynchronize(stream);
        tuned__workspace_free(d, &work);
        tuned__check_close(&c);
    }
    d->cuStreamDestroy(stream);
    if (rc == 0 && *ok && detail != NULL && cs.rows != s->rows)
        snprintf(detail, dn, "checked on %llu of its %llu rows", (unsigned long long)cs.rows,
                 (unsigned long long)s->rows);
    return rc;
}
