/* check_router.c: the router kinds' check (TUNED__REF_ROUTER and
 * TUNED__REF_ROUTER_BWD), beside check.c's softmax and check_ce.c's
 * cross-entropy methods. The logits come from reference.cu's generator
 * (uniform in [-8, 8) and its planted rows: NaN, +inf, -inf, the lowest
 * value, near 1e10); the float64 reference is router_reference.c's, on the
 * host, from a copy of them.
 *
 * Forward: two launches, the first with no counts and no source rows, the
 * second with counts and source rows; both pass the drawn bias (uniform in
 * [-0.05, 0.05): enough to move choices of scores in (0, 1)) where the key
 * says bias=1, as its calls do (the kernel compiles in that path alone,
 * and the launch refuses a bias the key does not name). Each chosen id
 * must be the reference's, or tie with it: the same order value within
 * fp32 rounding where a bias is added to a score in fp32 (both NaN
 * counting as a tie); ids distinct and in range; where the groups' choice
 * is itself within rounding of a tie, only the weights of the kernel's own
 * ids are held to the reference. The
 * weights of the kernel's ids are held to float64 (fp32 math: 2e-5
 * relative; bf16 weights within their rounding more), the counts to the
 * ids' histogram, the source rows to i * rows + r, and the guard bands
 * around every per-row output must keep their poison. The variant's
 * compiled-in options (tuned__check_router_flags: int32 ids, bf16 weights)
 * set the widths read.
 *
 * Backward: the ids are drawn distinct per row and dweights uniform in
 * [-1, 1); dlogits (the generic y, with its guards) must match the float64
 * gradient within the dtype's rounding of each element's magnitude. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/driver/check.h"
#include "src/driver/router_reference.h"

#define CU(call, what) TUNED__CU_RETURN(c->d, call, what)

/* Bytes of poison around each per-row output. */
#define GUARD 256
/* Order values closer than this (relative, at least absolute) may swap:
 * fp32 scores plus a bias, against float64. */
#define ORDER_TOL 4e-6
/* Weights: fp32 math against float64; bf16 weights round it by at most
 * half their ulp more (2^-9 of a value, 2^-8 at the low end of a binade). */
#define WEIGHT_RTOL 2e-5
#define WEIGHT_BF16_RTOL (WEIGHT_RTOL + 0x1p-8)

/* Host state of one router check. */
typedef struct router_state {
    unsigned char *x;   /* the logits as drawn (rows x cols of the dtype) */
    double *bias;       /* cols */
    long long *ids;     /* the backward's drawn ids, rows x k */
    double *dw;         /* the backward's drawn dweights, rows x k */
    void *out;          /* room for reading an output back */
    double *row;        /* 6 cols of work */
    bool have_x;        /* x holds the current input */
} router_state;

static int tensor(const tuned__check *c, const char *name)
{
    for (unsigned i = 0; i < c->kind->ntensors; i++)
        if (strcmp(c->kind->tensor[i].name, name) == 0)
            return (int)i;
    return -1;
}

static unsigned topk(const tuned__check *c)
{
    return tuned__params_value(c->kind, c->shape.params, "k", 1);
}

/* The bytes of the ids at int64, the room every check keeps for them. */
static size_t ids_bytes(const tuned__check *c)
{
    return c->shape.rows * topk(c) * 8;
}

static bool ids32(const tuned__check *c)
{
    return (c->flags & TUNED__ROUTER_FLAG_IDS32) != 0;
}

static bool weights_bf16(const tuned__check *c)
{
    return (c->flags & TUNED__ROUTER_FLAG_WEIGHTS_BF16) != 0;
}

/* The room of per-row tensor i (its poisoned guard excluded): its span
 * with int64 ids and fp32 weights. */
static size_t span(const tuned__check *c, int i)
{
    return (size_t)tuned__kind_span(c->kind, (unsigned)i, c->shape.rows,
                                    tuned__wire_cols_of(&c->shape), c->shape.cols, c->esize, 0);
}

/* What a variant writes of tensor i, under its compiled-in options. */
static size_t used_span(const tuned__check *c, int i)
{
    return (size_t)tuned__kind_span(c->kind, (unsigned)i, c->shape.rows,
                                    tuned__wire_cols_of(&c->shape), c->shape.cols, c->esize,
                                    c->flags);
}

int tuned__check_router_flags(tuned__check *c, unsigned flags, tuned__err *e)
{
    unsigned allowed = TUNED__ROUTER_FLAG_IDS32;
    if (c->kind->reference == TUNED__REF_ROUTER)
        allowed |= TUNED__ROUTER_FLAG_WEIGHTS_BF16;
    if ((flags & ~allowed) != 0)
        return tuned__errf(e, TUNED_EINVAL, "check: %s: options 0x%x (it has 0x%x)",
                           c->kind->name, flags, allowed);
    c->flags = flags;
    return 0;
}

int tuned__check_router_open(tuned__check *c, tuned__err *e)
{
    router_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory");
    c->method = st;
    size_t cols = c->shape.cols;
    st->x = malloc(c->bytes);
    st->bias = malloc(cols * sizeof *st->bias);
    st->row = malloc(6 * cols * sizeof *st->row);
    st->out = malloc(ids_bytes(c) > 4 * cols ? ids_bytes(c) + 2 * GUARD : 4 * cols + 2 * GUARD);
    if (c->kind->reference == TUNED__REF_ROUTER_BWD) {
        st->ids = malloc(ids_bytes(c));
        st->dw = malloc(c->shape.rows * topk(c) * sizeof *st->dw);
    }
    if (st->x == NULL || st->bias == NULL || st->row == NULL || st->out == NULL ||
        (c->kind->reference == TUNED__REF_ROUTER_BWD && (st->ids == NULL || st->dw == NULL)))
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory for the router's reference");
    /* Every non-matrix tensor in one allocation, each between guards. */
    size_t bytes = GUARD;
    for (unsigned i = 0; i < c->kind->ntensors; i++)
        if (c->kind->tensor[i].extent != TUNED__EXTENT_MATRIX)
            bytes += (span(c, (int)i) + 255) / 256 * 256 + GUARD;
    CUresult r = c->d->cuMemAlloc(&c->rows_alloc, bytes);
    if (r != CUDA_SUCCESS) {
        c->rows_alloc = 0;
        return tuned__cuda_check(c->d, r, e, "allocating the router's outputs");
    }
    c->rows_alloc_bytes = bytes;
    CUdeviceptr at = c->rows_alloc + GUARD;
    for (unsigned i = 0; i < c->kind->ntensors; i++)
        if (c->kind->tensor[i].extent != TUNED__EXTENT_MATRIX) {
            c->row_tensor[i] = at;
            at += (span(c, (int)i) + 255) / 256 * 256 + GUARD;
        }
    return 0;
}

void tuned__check_router_close(tuned__check *c)
{
    router_state *st = c->method;
    if (st == NULL)
        return;
    free(st->x);
    free(st->bias);
    free(st->ids);
    free(st->dw);
    free(st->out);
    free(st->row);
    free(st);
    c->method = NULL;
}

/* A small generator for the host's draws (splitmix64). */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
    return (double)(next(s) >> 11) * 0x1.0p-53;
}

/* Rows whose k largest logits sit where a variant's threads hold them
 * together, so that its short lists run dry and its rounds rerun exactly:
 * row 0 descends from column 0 (the first columns are one thread's
 * vector), row 1 descends over columns 0, 32, 64, ..., then 1, 33, ...
 * (one thread's passes where a pass is 32 columns). The 64 largest are
 * distinct (+0 down to -7.875), the rest -16: every dtype holds them
 * exactly. Random rows seldom do this:
 * a warp's 8 winners of 384 take 4 from one thread in about 1 row in
 * 800. And, where the generator plants nothing there (rows 3 to 7, or 9
 * or more), row 2: columns 0 to 63 rising by one ulp of the dtype from 1
 * (the rest -16), so that the best k are the highest of those columns
 * and differ only in their lowest bits, which sel=merge's entries drop
 * (it must see that and rerun exactly). And, where the generator plants
 * nothing at row 3 either (4 to 7 rows, or 12 or more), row 3: +8 at
 * columns 0, 5 and 10, -0 at column 1 and +0 at column 2 (which tie:
 * column 1 comes first), the rest -16, so that a biased router's k-th
 * choice (k above 5) is v = s + b of a score near 0, far below the top
 * three's, or below zero: sel=merge's biased entries hold distances from
 * the top clamped there, and must rerun; without a bias the rest tie. */
static int plant_rows(tuned__check *c, tuned__err *e)
{
    size_t cols = c->shape.cols, bytes = cols * c->esize;
    uint64_t rows = c->shape.rows;
    unsigned planted = (rows >= 3 && rows != 8) ? 3 : 2;
    if (planted == 3 && rows >= 4 && (rows < 9 || rows > 11))
        planted = 4;
    double ulp = c->shape.dtype == TUNED_FP32   ? 0x1.0p-23
                 : c->shape.dtype == TUNED_BF16 ? 0x1.0p-7
                                                : 0x1.0p-10;
    unsigned char *row = malloc(4 * bytes);
    if (row == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory");
    for (size_t j = 0; j < cols; j++) {
        size_t strided = (j % 32) * ((cols + 31) / 32) + j / 32;
        size_t rank[2] = {j, strided};
        for (int r = 0; r < 2; r++)
            tuned__check_double_to_bits(rank[r] < 64 ? 0.0 - 0.125 * (double)rank[r] : -16.0,
                                        c->shape.dtype, row + r * bytes + j * c->esize);
        tuned__check_double_to_bits(j < 64 ? 1.0 + ulp * (double)j : -16.0, c->shape.dtype,
                                    row + 2 * bytes + j * c->esize);
        double r3 = j % 5 == 0 && j <= 10 ? 8.0 : j == 1 ? -0.0 : j == 2 ? 0.0 : -16.0;
        tuned__check_double_to_bits(r3, c->shape.dtype, row + 3 * bytes + j * c->esize);
    }
    CUresult cr = c->d->cuStreamSynchronize(c->stream);
    if (cr == CUDA_SUCCESS)
        cr = c->d->cuMemcpyHtoD(c->x, row, planted * bytes);
    free(row);
    return tuned__cuda_check(c->d, cr, e, "planting the router's clustered rows");
}

int tuned__check_router_input(tuned__check *c, unsigned long long seed, tuned__err *e)
{
    router_state *st = c->method;
    st->have_x = false;
    uint64_t s = seed ^ 0x7a11e5u;
    size_t cols = c->shape.cols;
    float *bias32 = st->out;
    for (size_t j = 0; j < cols; j++) {
        bias32[j] = (float)(uniform(&s) * 0.1 - 0.05);
        st->bias[j] = bias32[j];
    }
    int b = tensor(c, "bias");
    if (b >= 0)
        CU(c->d->cuMemcpyHtoD(c->row_tensor[b], bias32, cols * 4), "uploading the bias");
    if (c->kind->reference != TUNED__REF_ROUTER_BWD)
        return c->shape.rows >= 2 ? plant_rows(c, e) : 0;
    /* distinct ids a row (a partial shuffle) and their weights' gradient */
    unsigned k = topk(c);
    unsigned *perm = malloc(cols * sizeof *perm);
    float *dw32 = malloc(c->shape.rows * k * sizeof *dw32);
    if (perm == NULL || dw32 == NULL) {
        free(perm);
        free(dw32);
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory");
    }
    for (uint64_t r = 0; r < c->shape.rows; r++) {
        for (unsigned j = 0; j < cols; j++)
            perm[j] = j;
        for (unsigned i = 0; i < k; i++) {
            unsigned pick = i + (unsigned)(next(&s) % (cols - i));
            unsigned t = perm[i];
            perm[i] = perm[pick], perm[pick] = t;
            st->ids[r * k + i] = perm[i];
            dw32[r * k + i] = (float)(uniform(&s) * 2.0 - 1.0);
            st->dw[r * k + i] = dw32[r * k + i];
        }
    }
    int ii = tensor(c, "ids"), di = tensor(c, "dweights");
    /* int32 ids (the variant's option): the drawn ids narrowed, in the
     * room the int64 ones take */
    int32_t *narrow = ids32(c) ? malloc(c->shape.rows * k * sizeof *narrow) : NULL;
    if (ids32(c) && narrow == NULL) {
        free(perm);
        free(dw32);
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory");
    }
    for (size_t i = 0; narrow != NULL && i < c->shape.rows * k; i++)
        narrow[i] = (int32_t)st->ids[i];
    CUresult cr = narrow != NULL
                      ? c->d->cuMemcpyHtoD(c->row_tensor[ii], narrow, c->shape.rows * k * 4)
                      : c->d->cuMemcpyHtoD(c->row_tensor[ii], st->ids, ids_bytes(c));
    if (cr == CUDA_SUCCESS)
        cr = c->d->cuMemcpyHtoD(c->row_tensor[di], dw32, c->shape.rows * k * 4);
    free(narrow);
    free(perm);
    free(dw32);
    return tuned__cuda_check(c->d, cr, e, "uploading the backward's ids and dweights");
}

/* The logits on the host, once per input. */
static int host_logits(tuned__check *c, tuned__err *e)
{
    router_state *st = c->method;
    if (st->have_x)
        return 0;
    CU(c->d->cuStreamSynchronize(c->stream), "drawing the router's logits");
    CU(c->d->cuMemcpyDtoH(st->x, c->x, c->bytes), "reading the router's logits");
    st->have_x = true;
    return 0;
}

static void row_doubles(const tuned__check *c, uint64_t r, double *out)
{
    const router_state *st = c->method;
    for (size_t j = 0; j < c->shape.cols; j++)
        out[j] = tuned__check_bits_to_double(st->x + (r * c->shape.cols + j) * c->esize,
                                             c->shape.dtype);
}

/* Whether the guards around per-row tensor i still hold poison. */
static int guards_hold(tuned__check *c, int i, unsigned char poison, bool *ok, tuned__err *e)
{
    unsigned char g[GUARD];
    size_t len = (span(c, i) + 255) / 256 * 256;
    *ok = true;
    for (int side = 0; side < 2; side++) {
        CUdeviceptr at = side == 0 ? c->row_tensor[i] - GUARD : c->row_tensor[i] + len;
        CU(c->d->cuMemcpyDtoH(g, at, GUARD), "reading a guard of the router's outputs");
        for (size_t b = 0; b < GUARD; b++)
            *ok &= g[b] == poison;
    }
    /* the room past what the variant writes, to the rounded length, too
     * (int32 ids and bf16 weights leave half their room) */
    size_t used = used_span(c, i), pad = len - used;
    if (pad > 0) {
        unsigned char *room = malloc(pad);
        if (room == NULL)
            return tuned__errf(e, TUNED_ENOMEM, "check: out of memory");
        CUresult cr = c->d->cuMemcpyDtoH(room, c->row_tensor[i] + used, pad);
        for (size_t b = 0; cr == CUDA_SUCCESS && b < pad; b++)
            *ok &= room[b] == poison;
        free(room);
        CU(cr, "reading a guard of the router's outputs");
    }
    return 0;
}

static bool near(double a, double b, double tol)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return fabs(a - b) <= tol;
}

/* Compares one forward launch's outputs with the reference (with_counts:
 * its counts and source rows too); *bad gets a description of the first
 * wrong row (empty: right). */
static int compare_forward(tuned__check *c, bool with_bias, bool with_counts, char *bad, size_t n,
                           tuned__err *e)
{
    router_state *st = c->method;
    unsigned k = topk(c);
    size_t cols = c->shape.cols;
    uint64_t rows = c->shape.rows;
    int wi = tensor(c, "weights"), ii = tensor(c, "ids"), ci = tensor(c, "counts");
    float *w = malloc(rows * k * sizeof *w);
    long long *ids = malloc(rows * k * sizeof *ids);
    unsigned *hist = calloc(cols, sizeof *hist);
    if (w == NULL || ids == NULL || hist == NULL) {
        free(w), free(ids), free(hist);
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory");
    }
    CUresult cr = c->d->cuStreamSynchronize(c->stream);
    if (cr == CUDA_SUCCESS)
        cr = c->d->cuMemcpyDtoH(w, c->row_tensor[wi], used_span(c, wi));
    if (cr == CUDA_SUCCESS)
        cr = c->d->cuMemcpyDtoH(ids, c->row_tensor[ii], used_span(c, ii));
    if (cr != CUDA_SUCCESS) {
        free(w), free(ids), free(hist);
        return tuned__cuda_check(c->d, cr, e, "reading the router's outputs");
    }
    /* narrow outputs widened in place, from the last */
    for (size_t i = rows * k; i-- > 0;) {
        if (weights_bf16(c)) {
            uint32_t bits = (uint32_t)((const uint16_t *)w)[i] << 16;
            memcpy(&w[i], &bits, sizeof bits);
        }
        if (ids32(c))
            ids[i] = ((const int32_t *)ids)[i];
    }
    const double wtol = weights_bf16(c) ? WEIGHT_BF16_RTOL : WEIGHT_RTOL;
    tuned__router_rule rule = tuned__router_rule_of(c->shape.params, c->scale);
    double *x = st->row, *score = x + cols, *order = score + cols, *v = order + cols;
    long long ref[64];
    double want[64];
    bad[0] = '\0';
    for (uint64_t r = 0; r < rows && bad[0] == '\0'; r++) {
        row_doubles(c, r, x);
        tuned__router_scores(x, (unsigned)cols, rule.score, score);
        tuned__router_order(x, score, with_bias ? st->bias : NULL, (unsigned)cols, rule.score,
                            order, v);
        double margin = tuned__router_choose(order, v, (unsigned)cols, &rule, ref, NULL);
        const long long *got = ids + r * k;
        bool groups_settled = !(margin <= ORDER_TOL * 4);
        for (unsigned i = 0; i < k && bad[0] == '\0'; i++) {
            if (got[i] < 0 || (size_t)got[i] >= cols) {
                snprintf(bad, n, "row %llu: id %u is %lld, outside [0, %zu)",
                         (unsigned long long)r, i, got[i], cols);
                break;
            }
            for (unsigned m = 0; m < i; m++)
                if (got[m] == got[i])
                    snprintf(bad, n, "row %llu: expert %lld chosen twice", (unsigned long long)r,
                             got[i]);
            hist[got[i]]++;
            if (!groups_settled || got[i] == ref[i])
                continue;
            double a = order[got[i]], b = order[ref[i]];
            double tol = with_bias ? ORDER_TOL * fmax(1.0, fabs(b)) : 0.0;
            if (!near(a, b, tol))
                snprintf(bad, n,
                         "row %llu: choice %u is expert %lld (order value %.9g), the float64 "
                         "reference's is %lld (%.9g)",
                         (unsigned long long)r, i, got[i], a, ref[i], b);
        }
        if (bad[0] != '\0')
            break;
        tuned__router_weights(x, score, got, &rule, want);
        for (unsigned i = 0; i < k; i++)
            if (!near(w[r * k + i], want[i], wtol * fabs(want[i]) + 1e-30)) {
                snprintf(bad, n, "row %llu: weight %u of expert %lld is %.9g, float64 %.9g",
                         (unsigned long long)r, i, got[i], (double)w[r * k + i], want[i]);
                break;
            }
    }
    if (bad[0] == '\0' && with_counts && ci >= 0) {
        int *counts = st->out;
        cr = c->d->cuMemcpyDtoH(counts, c->row_tensor[ci], cols * 4);
        for (size_t j = 0; cr == CUDA_SUCCESS && j < cols; j++)
            if ((unsigned)counts[j] != hist[j]) {
                snprintf(bad, n, "counts[%zu] is %d, the ids hold %u", j, counts[j], hist[j]);
                break;
            }
    }
    /* the source rows, read into the ids' room (the ids are checked) */
    int si = tensor(c, "source_rows");
    if (bad[0] == '\0' && with_counts && si >= 0 && cr == CUDA_SUCCESS) {
        int32_t *src = (int32_t *)ids;
        cr = c->d->cuMemcpyDtoH(src, c->row_tensor[si], rows * k * 4);
        for (uint64_t at = 0; cr == CUDA_SUCCESS && at < rows * k; at++)
            if ((int64_t)src[at] != (int64_t)(at % k) * (int64_t)rows + (int64_t)(at / k)) {
                snprintf(bad, n, "row %llu: source row %u is %d, not %llu",
                         (unsigned long long)(at / k), (unsigned)(at % k), src[at],
                         (unsigned long long)((at % k) * rows + at / k));
                break;
            }
    }
    free(w), free(ids), free(hist);
    return tuned__cuda_check(c->d, cr, e, "reading the router's counts and source rows");
}

/* Compares the backward's dlogits (y) with the reference. */
static int compare_backward(tuned__check *c, char *bad, size_t n, tuned__err *e)
{
    router_state *st = c->method;
    unsigned k = topk(c);
    size_t cols = c->shape.cols;
    unsigned char *y = malloc(c->bytes);
    if (y == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "check: out of memory");
    CUresult cr = c->d->cuStreamSynchronize(c->stream);
    if (cr == CUDA_SUCCESS)
        cr = c->d->cuMemcpyDtoH(y, c->y, c->bytes);
    if (cr != CUDA_SUCCESS) {
        free(y);
        return tuned__cuda_check(c->d, cr, e, "reading dlogits");
    }
    tuned__router_rule rule = tuned__router_rule_of(c->shape.params, c->scale);
    double *x = st->row, *score = x + cols, *dx = score + cols, *mag = dx + cols;
    bad[0] = '\0';
    for (uint64_t r = 0; r < c->shape.rows && bad[0] == '\0'; r++) {
        row_doubles(c, r, x);
        tuned__router_backward(x, st->ids + r * k, st->dw + r * k, (unsigned)cols, &rule, score,
                               dx, mag);
        for (size_t j = 0; j < cols; j++) {
            double got = tuned__check_bits_to_double(y + (r * cols + j) * c->esize,
                                                     c->shape.dtype);
            if (!near(got, dx[j], c->rtol * mag[j] + c->atol)) {
                snprintf(bad, n, "row %llu, column %zu: dlogits %.9g, float64 %.9g",
                         (unsigned long long)r, j, got, dx[j]);
                break;
            }
        }
    }
    free(y);
    return 0;
}

int tuned__check_router_run(tuned__check *c, const tuned__launch *l, tuned__workspace *work,
                            unsigned char poison, bool *wrong, char *detail, size_t n,
                            tuned__err *e)
{
    char bad[320] = "";
    int rc = host_logits(c, e);
    if (rc != 0)
        return rc;
    bool backward = c->kind->reference == TUNED__REF_ROUTER_BWD;
    int bi = tensor(c, "bias"), ci = tensor(c, "counts"), si = tensor(c, "source_rows");
    const bool biased = !backward && tuned__tensor_timed(c->kind, (unsigned)bi, c->shape.params);
    for (int pass = 0; pass < (backward ? 1 : 2) && bad[0] == '\0'; pass++) {
        CU(c->d->cuMemsetD8Async(c->y_alloc, poison, c->y_alloc_bytes, c->stream),
           "poisoning the output");
        CUdeviceptr tensors[TUNED__KIND_MAX_TENSORS];
        tuned__check_tensors(c, tensors);
        for (unsigned i = 0; i < c->kind->ntensors; i++)
            if (c->kind->tensor[i].role == TUNED__TENSOR_OUT &&
                c->kind->tensor[i].extent != TUNED__EXTENT_MATRIX)
                CU(c->d->cuMemsetD8Async(c->row_tensor[i] - GUARD, poison,
                                         (span(c, (int)i) + 255) / 256 * 256 + 2 * GUARD,
                                         c->stream),
                   "poisoning the router's outputs");
        if (!backward) {
            tensors[ci] = pass == 1 ? c->row_tensor[ci] : 0;
            tensors[si] = pass == 1 ? c->row_tensor[si] : 0;
            if (pass == 1)
                CU(c->d->cuMemsetD8Async(c->row_tensor[ci], 0, c->shape.cols * 4, c->stream),
                   "clearing the counts");
        }
        CU(tuned__launch_run(c->d, l, work, tensors, (long long)c->shape.rows,
                             (int)c->shape.cols, (long long)c->shape.cols, c->params, c->stream),
           "launching the variant");
        rc = backward ? compare_backward(c, bad, sizeof bad, e)
                      : compare_forward(c, biased, pass == 1, bad, sizeof bad, e);
        if (rc != 0)
            return rc;
        for (unsigned i = 0; i < c->kind->ntensors && bad[0] == '\0'; i++) {
            if (c->kind->tensor[i].role != TUNED__TENSOR_OUT ||
                c->kind->tensor[i].extent == TUNED__EXTENT_MATRIX ||
                (!backward && pass == 0 && ((int)i == ci || (int)i == si)))
                continue;
            bool ok;
            if ((rc = guards_hold(c, (int)i, poison, &ok, e)) != 0)
                return rc;
            if (!ok)
                snprintf(bad, sizeof bad, "a stray write beside %s", c->kind->tensor[i].name);
        }
        if (bad[0] != '\0' && !backward)
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " (%s%s)",
                     biased ? "a bias, " : "no bias, ",
                     pass == 1 ? "with counts and source rows" : "no counts");
    }
    if (bad[0] != '\0') {
        *wrong = true;
        if (detail != NULL)
            snprintf(detail, n, "%s", bad);
    }
    return 0;
}
