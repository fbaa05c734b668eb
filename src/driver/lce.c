/* lce.c: a chunked linear cross-entropy on the GPU (see lce.h). */
#include "src/driver/lce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/cross_entropy.h"
#include "src/codegen/source.h"
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
        tuned__lce_encode(v, l->dtype, host + i * l->esize);
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

/* Labels (every seventh row ignored, as in the reference) and the mean's
 * 1 / count. */
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
    free(lab);
    return rc;
}

int tuned__lce_open(tuned__lce *l, const tuned__driver *d, const tuned__nvrtc *n,
                    const tuned__cublas *blas, int arch, int sms, const tuned__kind_spec *inner,
                    tuned_dtype dtype, uint64_t tokens, uint64_t hidden, uint64_t vocab,
                    uint32_t max_chunk, const tuned__lce_ref *ref, tuned__lce_pick_fn pick,
                    void *pick_ctx, CUstream stream, tuned__err *e)
{
    memset(l, 0, sizeof *l);
    l->d = d, l->nvrtc = n, l->blas = blas, l->arch = arch, l->sms = sms, l->inner = inner;
    l->dtype = dtype, l->esize = tuned_dtype_size(dtype);
    l->tokens = tokens, l->hidden = hidden, l->vocab = vocab;
    l->max_chunk = max_chunk, l->pick = pick, l->pick_ctx = pick_ctx, l->stream = stream;
    if (inner == NULL || l->esize == 0 || tokens < 1 || hidden < 1 || vocab < 2 ||
        max_chunk < 1 || hidden > 0x7fffffffu || vocab > 0x7fffffffu ||
        (uint64_t)max_chunk * vocab > 0x7fffffffu * 4ull)
        return tuned__errf(e, TUNED_EINVAL, "lce: bad instance %llux%llu hidden %llu chunk %u",
                           (unsigned long long)tokens, (unsigned long long)vocab,
                           (unsigned long long)hidden, (unsigned)max_chunk);
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
        (rc = alloc(l, &l->logits, (uint64_t)max_chunk * vocab * es, "a chunk's logits", e)) ||
        (rc = alloc(l, &l->labels, tokens * 8, "labels", e)) ||
        (rc = alloc(l, &l->loss, tokens * 4, "losses", e)) ||
        (rc = alloc(l, &l->lse, tokens * 4, "lse", e)) ||
        (rc = alloc(l, &l->gscale, 4, "1 / count", e)) ||
        (rc = alloc(l, &l->error, 4, "the error word", e)) ||
        (rc = upload_values(l, l->h, ref != NULL ? ref->h : NULL, tokens * hidden, 1, e)) ||
        (rc = upload_values(l, l->w, ref != NULL ? ref->w : NULL, vocab * hidden, 2, e)) ||
        (rc = upload_labels(l, ref, e)) ||
        (rc = tuned__cuda_check(d, d->cuMemsetD8(l->error, 0, 4), e, "lce: zeroing the error word"))) {
        tuned__lce_close(l);
        return rc;
    }
    return 0;
}

void tuned__lce_close(tuned__lce *l)
{
    if (l->d == NULL)
        return;
    if (l->stream != NULL)
        l->d->cuStreamSynchronize(l->stream);
    for (unsigned i = 0; i < l->nmod; i++)
        l->d->cuModuleUnload(l->mod[i].module);
    CUdeviceptr bufs[] = {l->h, l->w, l->dh, l->dw, l->logits, l->labels, l->loss, l->lse,
                          l->gscale, l->error};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i] != 0)
            l->d->cuMemFree(bufs[i]);
    if (l->handle != NULL)
        l->blas->destroy(l->handle);
    memset(l, 0, sizeof *l);
}

/* The inner kernel for chunks of rows rows: compiled at first use. */
static int inner_for(tuned__lce *l, uint32_t rows, unsigned *slot, tuned__err *e)
{
    for (unsigned i = 0; i < l->nmod; i++)
        if (l->mod[i].rows == rows) {
            *slot = i;
            return 0;
        }
    if (l->nmod == TUNED__LCE_MAX_MODULES)
        return tuned__errf(e, TUNED_EINVAL, "lce: more than %d chunk sizes in one evaluation",
                           TUNED__LCE_MAX_MODULES);
    tuned__shape s = {.dtype = l->dtype, .rows = rows, .cols = l->vocab, .kernel = l->inner->id};
    tuned__config c;
    int rc = l->pick(l->pick_ctx, &s, &c, e);
    if (rc != 0)
        return rc;
    tuned__codegen_opts opts = {0};
    char *src = NULL;
    char name[TUNED__CONFIG_TEXT];
    tuned__config_format(&c, name, sizeof name);
    if ((rc = tuned__source_kernel(&c, &s, &opts, &src, e)) != 0)
        return tuned__err_prefix(e, rc, "lce: the %s kernel for %ux%llu: ", l->inner->name, rows,
                                 (unsigned long long)l->vocab);
    tuned__blob cubin;
    rc = tuned__nvrtc_compile(l->nvrtc, src, name, l->arch, TUNED__NVRTC_CUBIN, &cubin, e);
    free(src);
    if (rc != 0)
        return tuned__err_prefix(e, rc, "lce: compiling the %s kernel %s: ", l->inner->name, name);
    CUmodule m = NULL;
    CUresult r = l->d->cuModuleLoadData(&m, cubin.data);
    tuned__blob_free(&cubin);
    CU(r, "lce: loading the inner kernel");
    CUfunction fn = NULL;
    r = l->d->cuModuleGetFunction(&fn, m, tuned__source_entry(&c, &s));
    if (r != CUDA_SUCCESS) {
        l->d->cuModuleUnload(m);
        CU(r, "lce: finding the inner kernel's entry point");
    }
    *slot = l->nmod++;
    l->mod[*slot].rows = rows, l->mod[*slot].module = m, l->mod[*slot].fn = fn;
    l->mod[*slot].config = c;
    return 0;
}

/* The inner kernel in place on rows rows of logits starting at row c0. */
static int run_inner(tuned__lce *l, unsigned slot, uint64_t c0, uint32_t rows, tuned__err *e)
{
    tuned__shape s = {.dtype = l->dtype, .rows = rows, .cols = l->vocab, .kernel = l->inner->id};
    tuned__launch launch;
    int rc = tuned__launch_prepare(l->d, l->mod[slot].fn, &l->mod[slot].config, &s, l->sms,
                                   &launch, e);
    if (rc != 0)
        return rc;
    tuned__ce_params p = {.scale = 1.0f, .ignore_index = TUNED__LCE_IGNORE_INDEX,
                          .grad_scale = (const float *)(uintptr_t)l->gscale,
                          .error = (uint32_t *)(uintptr_t)l->error};
    /* the inner kind's tensors: logits, labels, grad (in place), loss, lse */
    CUdeviceptr tensors[TUNED__KIND_MAX_TENSORS] = {
        l->logits, l->labels + c0 * 8, l->logits, l->loss + c0 * 4, l->lse + c0 * 4};
    tuned__workspace none = {0};
    CU(tuned__launch_run(l->d, &launch, &none, tensors, rows, (int)l->vocab,
                         (long long)l->vocab, &p, l->stream),
       "lce: launching the inner kernel");
    return 0;
}

int tuned__lce_enqueue(tuned__lce *l, uint32_t chunk, bool gemms_only, tuned__err *e)
{
    if (chunk < 1 || chunk > l->max_chunk)
        return tuned__errf(e, TUNED_EINVAL, "lce: a chunk of %u rows (buffer: %u)",
                           (unsigned)chunk, (unsigned)l->max_chunk);
    const tuned__cublas *b = l->blas;
    int H = (int)l->hidden, V = (int)l->vocab;
    size_t es = l->esize;
    int rc;
    /* d weight starts at zero, as the call allocates it */
    CU(l->d->cuMemsetD8Async(l->dw, 0, l->vocab * l->hidden * es, l->stream),
       "lce: zeroing d weight");
    for (uint64_t c0 = 0; c0 < l->tokens; c0 += chunk) {
        uint32_t rows = (uint32_t)(l->tokens - c0 < chunk ? l->tokens - c0 : chunk);
        CUdeviceptr hc = l->h + c0 * l->hidden * es, dhc = l->dh + c0 * l->hidden * es;
        /* Row-major X (r x s) is column-major X^T (s x r), ld s. logits^T
         * (V x rows) = W (V x H: the stored H x V, transposed) h_c^T. */
        if ((rc = tuned__cublas_gemm(b, l->handle, l->dtype, TUNED__CUBLAS_OP_T,
                                     TUNED__CUBLAS_OP_N, V, (int)rows, H, 1.0f, l->w, H, hc, H,
                                     0.0f, l->logits, V, e, "logits = h W^T")) != 0)
            return rc;
        if (!gemms_only) {
            unsigned slot = 0;
            if ((rc = inner_for(l, chunk, &slot, e)) != 0 ||
                (rc = run_inner(l, slot, c0, rows, e)) != 0)
                return rc;
        }
        /* dh_c^T (H x rows) = W^T (H x V, stored) G^T (V x rows, stored) */
        if ((rc = tuned__cublas_gemm(b, l->handle, l->dtype, TUNED__CUBLAS_OP_N,
                                     TUNED__CUBLAS_OP_N, H, (int)rows, V, 1.0f, l->w, H,
                                     l->logits, V, 0.0f, dhc, H, e, "dh = dlogits W")) != 0)
            return rc;
        /* dW^T (H x V) += h_c^T (H x rows, stored) G (rows x V: the stored
         * V x rows, transposed) */
        if ((rc = tuned__cublas_gemm(b, l->handle, l->dtype, TUNED__CUBLAS_OP_N,
                                     TUNED__CUBLAS_OP_T, H, V, (int)rows, 1.0f, hc, H, l->logits,
                                     V, 1.0f, l->dw, H, e, "dW += dlogits^T h")) != 0)
            return rc;
    }
    return 0;
}

int tuned__lce_check(tuned__lce *l, const tuned__lce_ref *ref, uint32_t chunk, bool *wrong,
                     char *detail, size_t n, tuned__err *e)
{
    *wrong = false;
    size_t es = l->esize;
    uint64_t th = l->tokens * l->hidden, vh = l->vocab * l->hidden;
    /* 0x7B...: finite, far above any loss or gradient: an unwritten value fails */
    CU(l->d->cuMemsetD8Async(l->loss, 0x7B, l->tokens * 4, l->stream), "lce: poisoning");
    CU(l->d->cuMemsetD8Async(l->dh, 0x7B, th * es, l->stream), "lce: poisoning");
    int rc = tuned__lce_enqueue(l, chunk, false, e);
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
            snprintf(detail, n, "the %s kernel raised error bits 0x%x", l->inner->name,
                     (unsigned)err);
        } else {
            uint64_t bad = tuned__lce_ref_compare(ref, loss, dh, dw, chunk, detail, n);
            if (bad > 0) {
                *wrong = true;
                size_t at = strlen(detail);
                snprintf(detail + at, n - at, " (%llu values wrong; %llux%llu hidden %llu, "
                         "chunks of %u)", (unsigned long long)bad,
                         (unsigned long long)l->tokens, (unsigned long long)l->vocab,
                         (unsigned long long)l->hidden, (unsigned)chunk);
            }
        }
    }
    free(loss);
    free(dh);
    free(dw);
    return rc;
}
