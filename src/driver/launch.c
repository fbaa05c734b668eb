/* launch.c: a variant's launch geometry, its grid-split workspace and the
 * launch itself (see launch.h). */
#include "src/driver/launch.h"

#include "src/codegen/source.h"

int tuned__launch_prepare(const tuned__driver *d, CUfunction fn, const tuned__config *c,
                          const tuned__shape *s, int sm_count, tuned__launch *out, tuned__err *e)
{
    tuned__launch l = {.fn = fn, .block = c->warps * 32u,
                       .smem = (unsigned)tuned__source_dynamic_smem(c, s),
                       .kind = tuned__shape_spec(s), .key_params = s->params};
    if (l.kind == NULL)
        return tuned__errf(e, TUNED_EINVAL, "unknown kernel %u", tuned__shape_kernel(s));
    uint64_t blocks = (s->rows + c->rows - 1) / c->rows * tuned__config_launch_blocks_per_row(c);
    int rc = 0;
    if (c->cluster > 8 &&
        (rc = tuned__cuda_check(d,
                                d->cuFuncSetAttribute(
                                    fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                                e, "allowing a 16-block cluster")) != 0)
        return rc;
    /* The limit counts static shared memory too: raise it for any dynamic. */
    if (l.smem > 0 &&
        (rc = tuned__cuda_check(d,
                                d->cuFuncSetAttribute(
                                    fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)l.smem),
                                e, "raising the dynamic shared memory limit")) != 0)
        return rc;
    if (c->family == TUNED__FAMILY_TMA) {
        /* Persistent: as many row groups as fit on the GPU at once. A
         * cluster's blocks must share one GPC, so clusters leave block
         * slots unused (28 clusters of 16 at 4 blocks an SM on a 132-SM
         * H200, not 33): counted from blocks an SM, the clusters that do
         * not fit would walk their rows in a second round after the rest. */
        uint64_t groups = 0;
        if (c->cluster > 1) {
            CUlaunchConfig one = {.gridDimX = c->cluster, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = l.block, .blockDimY = 1, .blockDimZ = 1,
                                  .sharedMemBytes = l.smem};
            int clusters = 0;
            if ((rc = tuned__cuda_check(d, d->cuOccupancyMaxActiveClusters(&clusters, fn, &one), e,
                                        "clusters resident at once")) != 0)
                return rc;
            groups = clusters > 0 ? (uint64_t)clusters : 1;
        } else {
            int per_sm = 0;
            if ((rc = tuned__cuda_check(d,
                                        d->cuOccupancyMaxActiveBlocksPerMultiprocessor(
                                            &per_sm, fn, (int)l.block, l.smem),
                                        e, "occupancy")) != 0)
                return rc;
            groups = (uint64_t)(per_sm > 0 ? per_sm : 1) * (uint64_t)sm_count;
        }
        if (groups > s->rows)
            groups = s->rows;
        blocks = groups * c->cluster;
    }
    if (blocks < 1 || blocks > 2147483647ull)
        return tuned__errf(e, TUNED_EUNSUPPORTED, "%llu blocks exceed a CUDA grid",
                           (unsigned long long)blocks);
    if (c->grid > 1) {
        if (blocks > TUNED__GRID_MAX_BLOCKS)
            return tuned__errf(e, TUNED_EUNSUPPORTED,
                               "a grid split of %llu blocks (at most %d)",
                               (unsigned long long)blocks, TUNED__GRID_MAX_BLOCKS);
        l.cooperative = true;
        l.work_bytes = tuned__grid_work_bytes(blocks);
    }
    l.grid = (unsigned)blocks;
    *out = l;
    return 0;
}

int tuned__workspace_alloc(const tuned__driver *d, tuned__workspace *w, size_t bytes,
                           tuned__err *e)
{
    w->base = 0;
    w->bytes = 0;
    atomic_init(&w->launches, 0);
    int rc = tuned__cuda_check(d, d->cuMemAlloc(&w->base, bytes), e,
                               "allocating the grid-split workspace");
    if (rc != 0)
        return rc;
    /* Synchronous: the first launch may come on any stream. */
    rc = tuned__cuda_check(d, d->cuMemsetD8(w->base, 0, bytes), e,
                           "clearing the grid-split workspace");
    if (rc != 0) {
        d->cuMemFree(w->base);
        w->base = 0;
        return rc;
    }
    w->bytes = bytes;
    return 0;
}

void tuned__workspace_free(const tuned__driver *d, tuned__workspace *w)
{
    if (w->base != 0)
        d->cuMemFree(w->base);
    w->base = 0;
    w->bytes = 0;
}

CUresult tuned__launch_run(const tuned__driver *d, const tuned__launch *l, tuned__workspace *work,
                           const CUdeviceptr *tensors, long long rows, int cols,
                           long long row_stride, const void *params, CUstream stream)
{
    /* The parameters in the kind's order: tensors, shape, options, then a
     * grid split's workspace and launch number. */
    CUdeviceptr ptrs[TUNED__KIND_MAX_TENSORS];
    void *args[TUNED__KIND_MAX_TENSORS + 6];
    unsigned n = 0;
    for (unsigned i = 0; i < l->kind->ntensors; i++) {
        const unsigned present = l->kind->tensor[i].present_param;
        if (present != 0 &&
            (tensors[i] != 0) != (tuned__params_get(l->kind, l->key_params, present - 1u) == 1))
            return CUDA_ERROR_INVALID_VALUE;
        ptrs[i] = tensors[i];
        args[n++] = &ptrs[i];
    }
    args[n++] = &rows;
    args[n++] = &cols;
    args[n++] = &row_stride;
    if (l->kind->params_size > 0) {
        if (params == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        args[n++] = (void *)params;
    }
    if (!l->cooperative)
        return d->cuLaunchKernel(l->fn, l->grid, 1, 1, l->block, 1, 1, l->smem, stream, args,
                                 NULL);
    if (work == NULL || work->bytes < l->work_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned launch = atomic_fetch_add_explicit(&work->launches, 1, memory_order_relaxed);
    CUdeviceptr base = work->base;
    args[n++] = &base;
    args[n++] = &launch;
    return d->cuLaunchCooperativeKernel(l->fn, l->grid, 1, 1, l->block, 1, 1, l->smem, stream,
                                        args);
}
