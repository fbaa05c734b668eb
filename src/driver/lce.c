/* lce.c: a chunked linear cross-entropy on the GPU (see lce.h). */
#include "src/driver/lce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/cross_entropy.h"
#include "src/codegen/source.h"
#include "src/driver/check.h"
#include "src/driver/module.h"
#include "src/common/rng.h"

#define CU(call, what) TUNED__CU_RETURN(l->d, call, what)

/* Elements of a host tile of exact values the timed inputs are made of. */
#define TILE_ELEMS (1u << 20)

static int alloc(tuned__lce *l, CUdeviceptr *p, size_t bytes, const char *what, tuned__err *e)
{
    CUresult r = l->d->cuMemAlloc(p, bytes > 0 ? bytes : 1);
    if (r != CUDA_SUCCESS) {
        char context[160];
        snprintf(context, sizeof context, "lce: allocating %zu MiB for %s", bytes >> 20, what);
        return tuned__cuda_check(l->d, r, e, context);
    }
    return 0;
}

/* Fills count elements at dst with the values vals[i] (count of them; NULL:
 * a repeating tile of drawn multiples of 1/64). */
static int upload_values(tuned__lce *l, CUdeviceptr dst, const double *vals, uint64_t count,
                         uint64_t seed, tuned__err *e)
{
    size_t tile = vals != NULL ? (size_t)count : (count < TILE_ELEMS ? (size_t)count : TILE_ELEMS);
    unsigned char *host = malloc(tile * l->esize);
    if (host == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "lce: out of memory for the inputs");
    tuned__rng rng = {.state = seed};
    for (size_t i = 0; i < tile; i++) {
        double v = vals != NULL ? vals[i] : ((double)tuned__rng_below(&rng, 129) - 64.0) / 64.0;
        tuned__check_double_to_bits(v, l->dtype, host + i * l->esize);
    }
    int rc = 0;
    for (uint64_t at = 0; at < count && rc == 0; at += tile) {
        uint64_t n = count - at < tile ? count - at : tile;
        rc = tuned__cuda_check(l->d, l->d->cuMemcpyHtoD(dst + at * l->esize, host, n * l->esize),
                               e, "lce: uploading the inputs");
    }
    free(host);
    return rc;
}

/* Labels (every seventh row ignored, as in the reference), the mean's
 * 1 / count, and the blocks' labels that ignore every row. */
static int upload_labels(tuned__lce *l, const tuned__lce_ref *ref, tuned__err *e)
{
    int64_t *lab = malloc(l->tokens * sizeof *lab);
    if (lab == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "lce: out of memory for the labels");
    tuned__rng rng = {.state = 0x1ce1abe15ull};
    uint64_t valid = 0;
    for (uint64_t t = 0; t < l->tokens; t++) {
        lab[t] = ref != NULL ? ref->labels[t]
                 : t % 7 == 3 ? TUNED__LCE_IGNORE_INDEX
                              : (int64_t)tuned__rng_below(&rng, l->vocab);
        valid += lab[t] != TUNED__LCE_IGNORE_INDEX;
    }
    float gscale = valid > 0 ? (float)(1.0 / (double)valid) : 0.0f;
    int rc = tuned__cuda_check(l->d, l->d->cuMemcpyHtoD(l->labels, lab, l->tokens * sizeof *lab),
                               e, "lce: uploading the labels");
    if (rc == 0)
        rc = tuned__cuda_check(l->d, l->d->cuMemcpyHtoD(l->gscale, &gscale, sizeof gscale), e,
                               "lce: uploading 1 / count");
    /* and the labels the blocks' lse kernel takes: every row ignored */
    for (uint64_t t = 0; t < l->tokens; t++)
        lab[t] = TUNED__LCE_IGNORE_INDEX;
    if (rc == 0)
        rc = tuned__cuda_check(l->d,
                               l->d->cuMemcpyHtoD(l->ignored, lab, l->tokens * sizeof *lab), e,
                               "lce: uploading the ignored labels");
    free(lab);
    return rc;
}

/* Compiles the composite's block kernels (linear_ce_blocks.cu) for the
 * dtype and finds their entry points. */
static int open_blocks_module(tuned__lce *l, tuned__err *e)
{
    char *src = NULL;
    int rc = tuned__source_blocks(l->kind, l->dtype, &src, e);
    if (rc != 0)
        return rc;
    rc = tuned__module_from_source(l->d, l->nvrtc, src, "linear_ce_blocks", l->arch,
                                   "lce: the block kernels", &l->blocks_module, e);
    free(src);
    if (rc != 0)
        return rc;
    CU(l->d->cuModuleGetFunction(&l->pick_fn, l->blocks_module, "tuned_lce_pick"),
       "lce: finding tuned_lce_pick");
    CU(l->d->cuModuleGetFunction(&l->combine_fn, l->blocks_module, "tuned_lce_combine"),
       "lce: finding tuned_lce_combine");
    return 0;
}

int tuned__lce_open(tuned__lce *l, const tuned__driver *d, const tuned__nvrtc *n,
                    const tuned__cublas *blas, int arch, int sms, const tuned__kind_spec *kind,
                    tuned_dtype dtype, uint64_t tokens, uint64_t hidden, uint64_t vocab,
                    uint64_t max_logits, const tuned__lce_ref *ref, tuned__lce_pick_fn pick,
                    void *pick_ctx, CUstream stream, tuned__err *e)
{
    memset(l, 0, sizeof *l);
    l->d = d, l->nvrtc = n, l->blas = blas, l->arch = arch, l->sms = sms, l->kind = kind;
    l->dtype = dtype, l->esize = tuned_dtype_size(dtype);
    l->tokens = tokens, l->hidden = hidden, l->vocab = vocab;
    l->max_logits = max_logits, l->pick = pick, l->pick_ctx = pick_ctx, l->stream = stream;
    if (kind == NULL || tuned__kind(kind->inner) == NULL || l->esize == 0 || tokens < 1 ||
        tokens > 0x7fffffffu || hidden < 1 || vocab < 2 || max_logits < 1 ||
        hidden > 0x7fffffffu || vocab > 0x7fffffffu || max_logits > 0x7fffffffu * 4ull)
        return tuned__errf(e, TUNED_EINVAL, "lce: bad instance %llux%llu hidden %llu buffer %llu",
                           (unsigned long long)tokens, (unsigned long long)vocab,
                           (unsigned long long)hidden, (unsigned long long)max_logits);
    int rc;
    if ((rc = tuned__cublas_check(blas, blas->create(&l->handle), e, "creating a handle")) != 0) {
        l->handle = NULL;
        return rc;
    }
    size_t es = l->esize;
    if ((rc = tuned__cublas_check(blas, blas->set_stream(l->handle, stream), e,
                                  "setting the stream")) ||
        (rc = alloc(l, &l->h, tokens * hidden * es, "hidden", e)) ||
        (rc = alloc(l, &l->w, vocab * hidden * es, "weight", e)) ||
        (rc = alloc(l, &l->dh, tokens * hidden * es, "d hidden", e)) ||
        (rc = alloc(l, &l->dw, vocab * hidden * es, "d weight", e)) ||
        (rc = alloc(l, &l->logits, max_logits * es, "a chunk's logits", e)) ||
        (rc = alloc(l, &l->labels, tokens * 8, "labels", e)) ||
        (rc = alloc(l, &l->loss, tokens * 4, "losses", e)) ||
        (rc = alloc(l, &l->lse, tokens * 4, "lse", e)) ||
        (rc = alloc(l, &l->gscale, 4, "1 / count", e)) ||
        (rc = alloc(l, &l->error, 4, "the error word", e)) ||
        (rc = alloc(l, &l->target, tokens * 4, "the target logits", e)) ||
        (rc = alloc(l, &l->ignored, tokens * 8, "the ignored labels", e)) ||
        (rc = upload_values(l, l->h, ref != NULL ? ref->h : NULL, tokens * hidden, 1, e)) ||
        (rc = upload_values(l, l->w, ref != NULL ? ref->w : NULL, vocab * hidden, 2, e)) ||
        (rc = upload_labels(l, ref, e)) ||
        (rc = tuned__cuda_check(d, d->cuMemsetD8(l->error, 0, 4), e, "lce: zeroing the error word")) ||
        (kind->block_parts[0] != NULL && (rc = open_blocks_module(l, e)) != 0)) {
        tuned__lce_close(l);
        return rc;
    }
    return 0;
}

/* Unloads every kernel module met so far. */
static void unload_kernels(tuned__lce *l)
{
    for (unsigned i = 0; i < l->nmod; i++)
        l->d->cuModuleUnload(l->mod[i].module);
    l->nmod = 0;
}

void tuned__lce_close(tuned__lce *l)
{
    if (l->d == NULL)
        return;
    if (l->stream != NULL)
        l->d->cuStreamSynchronize(l->stream);
    unload_kernels(l);
    if (l->blocks_module != NULL)
        l->d->cuModuleUnload(l->blocks_module);
    CUdeviceptr bufs[] = {l->h,      l->w,     l->dh,    l->dw,        l->logits,
                          l->labels, l->loss,  l->lse,   l->gscale,    l->error,
                          l->block_lse, l->target, l->ignored};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i] != 0)
            l->d->cuMemFree(bufs[i]);
    if (l->handle != NULL)
        l->blas->destroy(l->handle);
    memset(l, 0, sizeof *l);
}

/* The kernel of kind `kernel` for rows x cols (a chunk's rows, its
 * block's columns): compiled at first use. The cache is emptied when full;
 * a stream sync first, as a module in use may not be unloaded. */
static int kernel_for(tuned__lce *l, uint8_t kernel, uint32_t rows, uint64_t cols, unsigned *slot,
                      tuned__err *e)
{
    for (unsigned i = 0; i < l->nmod; i++)
        if (l->mod[i].kernel == kernel && l->mod[i].rows == rows && l->mod[i].cols == cols) {
            *slot = i;
            return 0;
        }
    const tuned__kind_spec *k = tuned__kind(kernel);
    if (k == NULL)
        return tuned__errf(e, TUNED_EINVAL, "lce: %s runs an unknown kernel %u", l->kind->name,
                           (unsigned)kernel);
    if (l->nmod == TUNED__LCE_MAX_MODULES) {
        CU(l->d->cuStreamSynchronize(l->stream), "lce: waiting to unload kernels");
        unload_kernels(l);
    }
    tuned__shape s = {.dtype = l->dtype, .rows = rows, .cols = cols, .kernel = kernel};
    tuned__config c;
    int rc = l->pick(l->pick_ctx, &s, &c, e);
    if (rc != 0)
        return rc;
    tuned__codegen_opts opts = {0};
    char *src = NULL;
    char name[TUNED__CONFIG_TEXT];
    tuned__config_format(&c, name, sizeof name);
    if ((rc = tuned__source_kernel(&c, &s, &opts, &src, e)) != 0)
        return tuned__err_prefix(e, rc, "lce: the %s kernel for %ux%llu: ", k->name, rows,
                                 (unsigned long long)cols);
    char what[TUNED__CONFIG_TEXT + 64];
    snprintf(what, sizeof what, "lce: the %s kernel %s", k->name, name);
    CUmodule m = NULL;
    rc = tuned__module_from_source(l->d, l->nvrtc, src, name, l->arch, what, &m, e);
    free(src);
    if (rc != 0)
        return rc;
    CUfunction fn = NULL;
    CUresult r = l->d->cuModuleGetFunction(&fn, m, tuned__source_entry(&c, &s));
    if (r != CUDA_SUCCESS) {
        l->d->cuModuleUnload(m);
        CU(r, "lce: finding a kernel's entry point");
    }
    *slot = l->nmod++;
    l->mod[*slot].kernel = kernel, l->mod[*slot].rows = rows, l->mod[*slot].cols = cols;
    l->mod[*slot].module = m, l->mod[*slot].fn = fn, l->mod[*slot].config = c;
    return 0;
}

/* Kernel `kernel`'s module for chunks of chunk rows, cols columns, run on
 * rows of them (a partial last chunk runs the full chunk's kernel) with
 * the kind's tensors and the options p. */
static int run_kernel(tuned__lce *l, uint8_t kernel, uint32_t chunk, uint32_t rows,
                      uint64_t cols, const CUdeviceptr *tensors, const tuned__ce_params *p,
                      tuned__err *e)
{
    unsigned slot = 0;
    int rc = kernel_for(l, kernel, chunk, cols, &slot, e);
    if (rc != 0)
        return rc;
    tuned__shape s = {.dtype = l->dtype, .rows = rows, .cols = cols, .kernel = kernel};
    tuned__launch launch;
    if ((rc = tuned__launch_prepare(l->d, l->mod[slot].fn, &l->mod[slot].config, &s, l->sms,
                                    &launch, e)) != 0)
        return rc;
    tuned__workspace none = {0};
    CU(tuned__launch_run(l->d, &launch, &none, tensors, rows, (int)cols, (long long)cols, p,
                         l->stream),
       "lce: launching a kernel");
    return 0;
}

/* The options every kernel of the block takes: no smoothing, z-loss or
 * cap; the mean's 1 / count; the error word. */
static tuned__ce_params ce_params(const tuned__lce *l)
{
    return (tuned__ce_params){.scale = 1.0f, .ignore_index = TUNED__LCE_IGNORE_INDEX,
                              .grad_scale = (const float *)(uintptr_t)l->gscale,
                              .error = (uint32_t *)(uintptr_t)l->error};
}

/* logits (rows x (v1 - v0), ld v1 - v0) = h_c W[v0:v1]^T. Row-major X
 * (r x s) is column-major X^T (s x r), ld s: logits^T (cols x rows) =
 * W_b (cols x H: the stored H x cols, transposed) h_c^T. */
static int logits_gemm(tuned__lce *l, CUdeviceptr hc, uint32_t rows, uint64_t v0, uint64_t v1,
                       tuned__err *e)
{
    int H = (int)l->hidden, cols = (int)(v1 - v0);
    return tuned__cublas_gemm(l->blas, l->handle, l->dtype, TUNED__CUBLAS_OP_T,
                              TUNED__CUBLAS_OP_N, cols, (int)rows, H, 1.0f,
                              l->w + v0 * l->hidden * l->esize, H, hc, H, 0.0f, l->logits, cols,
                              e, "logits = h W^T");
}

/* The gradient GEMMs of a block v0:v1 whose d logits are in the buffer:
 * dh_c (+)= G W_b (add: onto what dh_c holds), dW_b += G^T h_c. */
static int grad_gemms(tuned__lce *l, CUdeviceptr hc, CUdeviceptr dhc, uint32_t rows, uint64_t v0,
                      uint64_t v1, bool add, tuned__err *e)
{
    int H = (int)l->hidden, cols = (int)(v1 - v0);
    size_t at = v0 * l->hidden * l->esize;
    int rc;
    /* dh_c^T (H x rows) = W_b^T (H x cols, stored) G^T (cols x rows, stored) */
    if ((rc = tuned__cublas_gemm(l->blas, l->handle, l->dtype, TUNED__CUBLAS_OP_N,
                                 TUNED__CUBLAS_OP_N, H, (int)rows, cols, 1.0f, l->w + at, H,
                                 l->logits, cols, add ? 1.0f : 0.0f, dhc, H, e,
                                 "dh = dlogits W")) != 0)
        return rc;
    /* dW_b^T (H x cols) += h_c^T (H x rows, stored) G (rows x cols: the
     * stored cols x rows, transposed) */
    return tuned__cublas_gemm(l->blas, l->handle, l->dtype, TUNED__CUBLAS_OP_N,
                              TUNED__CUBLAS_OP_T, H, cols, (int)rows, 1.0f, hc, H, l->logits,
                              cols, 1.0f, l->dw + at, H, e, "dW += dlogits^T h");
}

/* Launches one of the block kernels over rows rows, a thread a row. */
static int run_block_kernel(tuned__lce *l, CUfunction fn, uint32_t rows, void **args,
                            const char *what, tuned__err *e)
{
    CU(l->d->cuLaunchKernel(fn, (rows + 255) / 256, 1, 1, 256, 1, 1, 0, l->stream, args, NULL),
       what);
    return 0;
}

/* The vocabulary blocks of step columns, the last narrower. */
static int block_count(const tuned__lce *l, uint64_t step)
{
    return (int)((l->vocab + step - 1) / step);
}

/* The end of the vocabulary block of step columns that starts at v0. */
static uint64_t block_end(const tuned__lce *l, uint64_t v0, uint64_t step)
{
    return v0 + step < l->vocab ? v0 + step : l->vocab;
}

/* The blocks' lse buffer, at least bytes (grown to the largest chunk met;
 * work queued on the old buffer finishes first). */
static int grow_block_lse(tuned__lce *l, uint64_t bytes, tuned__err *e)
{
    if (bytes <= l->block_lse_bytes)
        return 0;
    CU(l->d->cuStreamSynchronize(l->stream), "lce: waiting to grow the blocks' lse");
    if (l->block_lse != 0)
        l->d->cuMemFree(l->block_lse);
    l->block_lse = 0, l->block_lse_bytes = 0;
    int rc = alloc(l, &l->block_lse, bytes, "the blocks' lse", e);
    if (rc == 0)
        l->block_lse_bytes = bytes;
    return rc;
}

/* The lse pass of a chunk of rows rows at c0 in nblocks blocks of step
 * columns: per block its logits, its lse (the block_lse kind, every label
 * ignored) and the target logits it holds; then the rows' lse and loss.
 * The last block's logits stay in the buffer. */
static int blocks_lse_pass(tuned__lce *l, uint32_t chunk, uint64_t c0, uint32_t rows,
                           uint64_t step, int nblocks, tuned__err *e)
{
    CUdeviceptr hc = l->h + c0 * l->hidden * l->esize, labels = l->labels + c0 * 8;
    int irows = (int)rows;
    tuned__ce_params p = ce_params(l);
    int rc = grow_block_lse(l, (uint64_t)nblocks * rows * 4, e);
    for (int b = 0; rc == 0 && b < nblocks; b++) {
        uint64_t v0 = (uint64_t)b * step, v1 = block_end(l, v0, step);
        /* the loss kind's tensors: logits, labels, grad (unused), loss, lse */
        CUdeviceptr t[TUNED__KIND_MAX_TENSORS] = {l->logits, l->ignored, 0, 0,
                                                  l->block_lse + (uint64_t)b * rows * 4};
        int cols = (int)(v1 - v0);
        long long first = (long long)v0;
        void *args[] = {&l->logits, &irows, &cols, &labels, &first, &l->target};
        if ((rc = logits_gemm(l, hc, rows, v0, v1, e)) == 0 &&
            (rc = run_kernel(l, l->kind->block_lse, chunk, rows, v1 - v0, t, &p, e)) == 0)
            rc = run_block_kernel(l, l->pick_fn, rows, args, "lce: launching the pick", e);
    }
    if (rc != 0)
        return rc;
    long long ignore = TUNED__LCE_IGNORE_INDEX;
    CUdeviceptr lse = l->lse + c0 * 4, loss = l->loss + c0 * 4;
    void *args[] = {&l->block_lse, &nblocks, &irows, &labels, &ignore, &l->target, &lse, &loss};
    return run_block_kernel(l, l->combine_fn, rows, args, "lce: launching the combine", e);
}

/* One chunk of rows rows at c0 in vocabulary blocks of step columns: the
 * lse pass, then each block's gradients, the last block (still in the
 * buffer) first. The floor (gemms_only) makes each block's logits once:
 * the gradient loop's GEMMs alone. */
static int chunk_in_blocks(tuned__lce *l, uint32_t chunk, uint64_t c0, uint32_t rows,
                           uint64_t step, bool gemms_only, tuned__err *e)
{
    size_t es = l->esize;
    CUdeviceptr hc = l->h + c0 * l->hidden * es, dhc = l->dh + c0 * l->hidden * es;
    int nblocks = block_count(l, step);
    int rc;
    if (!gemms_only && (rc = blocks_lse_pass(l, chunk, c0, rows, step, nblocks, e)) != 0)
        return rc;
    tuned__ce_params slice = ce_params(l);
    slice.classes = (int32_t)l->vocab;
    for (int n = 0; n < nblocks; n++) {
        int b = n == 0 ? nblocks - 1 : n - 1;
        uint64_t v0 = (uint64_t)b * step, v1 = block_end(l, v0, step);
        if ((n > 0 || gemms_only) && (rc = logits_gemm(l, hc, rows, v0, v1, e)) != 0)
            return rc;
        if (!gemms_only) {
            slice.class_offset = (int64_t)v0;
            /* the backward kind's tensors: logits, labels, lse, grad (in place) */
            CUdeviceptr t[TUNED__KIND_MAX_TENSORS] = {l->logits, l->labels + c0 * 8,
                                                      l->lse + c0 * 4, l->logits};
            if ((rc = run_kernel(l, l->kind->block_grad, chunk, rows, v1 - v0, t, &slice, e)) !=
                0)
                return rc;
        }
        if ((rc = grad_gemms(l, hc, dhc, rows, v0, v1, n > 0, e)) != 0)
            return rc;
    }
    return 0;
}

/* One chunk of whole rows: its logits, the fused kernel in place, the
 * gradient GEMMs. */
static int chunk_whole(tuned__lce *l, uint32_t chunk, uint64_t c0, uint32_t rows,
                       bool gemms_only, tuned__err *e)
{
    size_t es = l->esize;
    CUdeviceptr hc = l->h + c0 * l->hidden * es, dhc = l->dh + c0 * l->hidden * es;
    int rc;
    if ((rc = logits_gemm(l, hc, rows, 0, l->vocab, e)) != 0)
        return rc;
    if (!gemms_only) {
        tuned__ce_params p = ce_params(l);
        /* the fused kind's tensors: logits, labels, grad (in place), loss, lse */
        CUdeviceptr t[TUNED__KIND_MAX_TENSORS] = {l->logits, l->labels + c0 * 8, l->logits,
                                                  l->loss + c0 * 4, l->lse + c0 * 4};
        if ((rc = run_kernel(l, l->kind->inner, chunk, rows, l->vocab, t, &p, e)) != 0)
            return rc;
    }
    return grad_gemms(l, hc, dhc, rows, 0, l->vocab, false, e);
}

int tuned__lce_enqueue(tuned__lce *l, const tuned__config *c, bool gemms_only, tuned__err *e)
{
    uint32_t chunk = c->chunk;
    uint64_t step = tuned__kind_block_cols(l->vocab, c->splits);
    bool blocks = step < l->vocab;
    if (c->family != TUNED__FAMILY_CHUNK || chunk < 1 || c->splits > TUNED__MAX_SPLITS ||
        (uint64_t)(chunk < l->tokens ? chunk : l->tokens) * step > l->max_logits)
        return tuned__errf(e, TUNED_EINVAL, "lce: a chunk of %u rows in %u blocks (buffer: %llu "
                           "logits)", (unsigned)chunk, (unsigned)c->splits,
                           (unsigned long long)l->max_logits);
    if (blocks && (l->kind->block_lse == 0 || l->blocks_module == NULL))
        return tuned__errf(e, TUNED_EINVAL, "lce: %s is not made in vocabulary blocks",
                           l->kind->name);
    /* d weight starts at zero, as the call allocates it */
    CU(l->d->cuMemsetD8Async(l->dw, 0, l->vocab * l->hidden * l->esize, l->stream),
       "lce: zeroing d weight");
    int rc = 0;
    for (uint64_t c0 = 0; c0 < l->tokens && rc == 0; c0 += chunk) {
        uint32_t rows = (uint32_t)(l->tokens - c0 < chunk ? l->tokens - c0 : chunk);
        rc = blocks ? chunk_in_blocks(l, chunk, c0, rows, step, gemms_only, e)
                    : chunk_whole(l, chunk, c0, rows, gemms_only, e);
    }
    return rc;
}

int tuned__lce_check(tuned__lce *l, const tuned__lce_ref *ref, const tuned__config *c,
                     bool *wrong, char *detail, size_t n, tuned__err *e)
{
    uint32_t chunk = c->chunk;
    *wrong = false;
    size_t es = l->esize;
    uint64_t th = l->tokens * l->hidden, vh = l->vocab * l->hidden;
    /* 0x7B...: finite, far above any loss or gradient: an unwritten value fails */
    CU(l->d->cuMemsetD8Async(l->loss, 0x7B, l->tokens * 4, l->stream), "lce: poisoning");
    CU(l->d->cuMemsetD8Async(l->dh, 0x7B, th * es, l->stream), "lce: poisoning");
    int rc = tuned__lce_enqueue(l, c, false, e);
    if (rc != 0)
        return rc;
    CU(l->d->cuStreamSynchronize(l->stream), "lce: running the checked block");
    float *loss = malloc(l->tokens * sizeof *loss);
    unsigned char *dh = malloc(th * es), *dw = malloc(vh * es);
    uint32_t err = 0;
    if (loss == NULL || dh == NULL || dw == NULL)
        rc = tuned__errf(e, TUNED_ENOMEM, "lce: out of memory for the check");
    if (rc == 0)
        rc = tuned__cuda_check(l->d, l->d->cuMemcpyDtoH(loss, l->loss, l->tokens * 4), e,
                               "lce: reading the losses");
    if (rc == 0)
        rc = tuned__cuda_check(l->d, l->d->cuMemcpyDtoH(dh, l->dh, th * es), e,
                               "lce: reading d hidden");
    if (rc == 0)
        rc = tuned__cuda_check(l->d, l->d->cuMemcpyDtoH(dw, l->dw, vh * es), e,
                               "lce: reading d weight");
    if (rc == 0)
        rc = tuned__cuda_check(l->d, l->d->cuMemcpyDtoH(&err, l->error, 4), e,
                               "lce: reading the error word");
    if (rc == 0) {
        if (err != 0) {
            *wrong = true;
            snprintf(detail, n, "the %s kernels raised error bits 0x%x", l->kind->name,
                     (unsigned)err);
        } else {
            uint64_t step = tuned__kind_block_cols(l->vocab, c->splits);
            uint64_t bad = tuned__lce_ref_compare(ref, loss, dh, dw, chunk,
                                                  (uint64_t)block_count(l, step), detail, n);
            if (bad > 0) {
                *wrong = true;
                size_t at = strlen(detail);
                snprintf(detail + at, n - at, " (%llu values wrong; %llux%llu hidden %llu, "
                         "chunks of %u in %u blocks)", (unsigned long long)bad,
                         (unsigned long long)l->tokens, (unsigned long long)l->vocab,
                         (unsigned long long)l->hidden, (unsigned)chunk,
                         c->splits > 0 ? (unsigned)c->splits : 1u);
            }
        }
    }
    free(loss);
    free(dh);
    free(dw);
    return rc;
}
