/* softmax_bwd.cu: the backward kernels, family "rows": a row of y and a
 * row of dy held in registers by a group of threads (part of a warp, one
 * or more warps, a whole block, or a thread-block cluster, sm_90).
 *
 * Idea: the gradient of softmax over a row is dx = y (dy - sum(dy y)), of
 * log_softmax (T_LOG, y the log-probabilities) dx = dy - exp(y) sum(dy).
 * Both read two tensors and write one, so the floor is 1.5 copies; each is
 * one pass: the stages of softmax_rows_common.cu, generalised to two rows:
 *   load    y and dy, each thread issuing all its vector loads of both
 *           before it reads any (0 in the slots past the row: T_BWD)
 *   dot     the thread's sum of dy y (softmax) or of dy (log_softmax)
 *   reduce  that one sum over the row's threads: warp shuffles, shared
 *           memory across the group's warps, mailboxes in distributed
 *           shared memory across the cluster's blocks, or a workspace in
 *           global memory across the blocks of a grid split
 *   store   dx, a vector at a time
 * dy's rows are loaded by the same vector slots as y's; where dy's offset
 * inside a vector differs from y's (unaligned calls only) its elements go
 * one by one.
 *
 * Variants (codegen prepends the defines, then softmax_common.cu and
 * softmax_rows_common.cu, which explains each, and for a grid split
 * softmax_grid_common.cu):
 *   1. T_DTYPE      0 fp16, 1 bf16, 2 fp32 (math is always fp32)
 *   2. T_WARPS      warps per block: 1, 2, 4, 8, 16, 32
 *   3. T_ROWS       rows per block: 1 to 32 * T_WARPS
 *   4. T_CLUSTER    blocks per row (a cluster; 1 = none; else T_ROWS = 1)
 *   5. T_GRID       blocks per row through global memory (2 and up; else
 *                   absent): tuned_softmax_bwd_grid, a cooperative launch
 *                   with a workspace of T_GRID_SLOTS slots; T_ROWS = 1,
 *                   T_CLUSTER = 1
 *   6. T_MIN_BLOCKS blocks per SM the registers must leave room for (1, 2, 4)
 *   7. T_VEC        elements per vector access (at most 16 bytes)
 *   8. T_ITERS      vector accesses per thread per row, of each tensor
 *   9. T_COLS       the column count the source is generated for
 *  10. T_HEAD_FREE  1: every row of y, dy and dx starts on a vector boundary
 *  11. T_LD         0 ld.global, 1 .nc, 2 .cs (both inputs)
 *  12. T_ST         0 st.global, 1 .cs
 *  13. T_REG_PACKED 1: keep the loaded words, convert on use
 *  14. T_LOG        1: log_softmax_bwd
 *  15. T_BWD        1 (always, here)
 *  16. T_PLANT_BUG  test builds only: 1 or 2, a planted bug
 * (T_EXP16 and T_FUSED are 0: one sum, nothing to exponentiate before
 * the store.)
 *
 * Checked against: the float64 reference in reference.cu (tuned_check_bwd:
 * per element, with the dtype's tolerances plus the fp32 rounding of the
 * row's sum, NaN for NaN), on y computed in float64 from generated input
 * (tuned_gen_probs) and uniform dy. */

#if !T_BWD || T_FUSED || T_EXP16
#error "softmax_bwd.cu is built with T_BWD 1, T_FUSED 0, T_EXP16 0"
#endif

/* dot: this thread's part of the row's sum, sum(dy y) or (T_LOG) sum(dy). */
__device__ __forceinline__ float thread_dot(const Held &hy, const Held &hd)
{
    float sum = 0.0f;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
#if T_LOG
            sum += held_value(hd, it, k);
#else
            sum = fmaf(held_value(hd, it, k), held_value(hy, it, k), sum);
#endif
#if T_LOG
    (void)hy;
#endif
    return sum;
}

/* The backward kernels count a row's slots from its vector (codegen never
 * gives them the 128-byte line: two rows held leave no registers for it),
 * so equal heads are equal offsets inside a vector. */
#if T_HEAD_ALIGN != T_VEC
#error "the backward kernels count a row's slots from its vector"
#endif

/* load of y's row and dy's, by y's vector slots: both rows' loads issued
 * before either is finished, so that none waits for another. dy's
 * vectors go whole where its offset inside a vector is y's (always, when
 * the call's rows start on a vector boundary), else element by element. */
__device__ __forceinline__ void load_rows(Held &hy, Held &hd, const RowPtrs &p, const RowPtrs &q,
                                          int lane, int cols, bool active)
{
    RowWords scratch_y, scratch_d;
    RowWords &wy = words_of(hy, scratch_y), &wd = words_of(hd, scratch_d);
    const bool dy_vec_ok = q.head == p.head;
    load_row_words(wy, p.xr, p.head, true, lane, cols, active);
    load_row_words(wd, q.xr, p.head, dy_vec_ok, lane, cols, active);
    finish_row(hy, wy, p.head, true, lane, cols, active);
    finish_row(hd, wd, p.head, dy_vec_ok, lane, cols, active);
}

/* store's value: dx of element k of vector it, sum the row's. */
__device__ __forceinline__ float grad_value(const Held &hy, const Held &hd, int it, int k,
                                            float sum)
{
    const float y = held_value(hy, it, k), dy = held_value(hd, it, k);
#if T_LOG
    float p;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(p) : "f"(y * LOG2E));
    return fmaf(-p, sum, dy);
#else
    return y * (dy - sum);
#endif
}

#if T_GRID > 1
/* A row cut over T_GRID blocks of the grid (a cooperative launch): the
 * stages above, the block's sum then combined with the row's other blocks'
 * through the workspace (softmax_grid_common.cu). */
extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS)
tuned_softmax_bwd_grid(const unsigned char *y, const unsigned char *dy, unsigned char *dx,
                       long long rows, int cols, long long row_stride, unsigned char *work,
                       unsigned launch)
{
    __shared__ float partial_sum[T_WARPS];
    __shared__ float exchange_max[1];
    __shared__ float exchange_sum[1];
    Mailbox no_cluster; /* T_CLUSTER is 1: the grid's workspace joins the blocks */

    const RowSlot slot = row_slot();
    const bool active = true;
    const RowPtrs p = row_ptrs(y, dx, slot.row, active, row_stride);
    const RowPtrs q = row_ptrs(dy, dx, slot.row, active, row_stride);
    const unsigned work_slot = launch % T_GRID_SLOTS;
    const u64 arrival = threadIdx.x == 0 ? grid_arrive(work, work_slot) : 0u;

    Held hy, hd;
    load_rows(hy, hd, p, q, slot.lane, cols, active);
    float sum = row_reduce(thread_dot(hy, hd), partial_sum, no_cluster, true, SumOp());
    float unused_max = 0.0f;
    grid_combine(unused_max, sum, work, work_slot, arrival, exchange_max, exchange_sum, 1.0f);
    store_row(p, slot.lane, cols, active, [&](int it, u32(&out)[NWORDS]) {
        vector_words(out, [&](int k) { return grad_value(hy, hd, it, k, sum); });
    });
    plant_overrun(p, slot.row, rows, slot.lane, cols);
}
#else
extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS) CLUSTER_ATTRIBUTE
tuned_softmax_bwd_rows(const unsigned char *y, const unsigned char *dy, unsigned char *dx,
                       long long rows, int cols, long long row_stride)
{
    __shared__ float partial_sum[T_WARPS];
    __shared__ Mailbox box_sum;

    open_sum_mailbox(box_sum);
    const RowSlot slot = row_slot();
    /* As in softmax_rows.cu: threads past the last row take part in the
     * barriers only. */
    const bool active = T_ROWS == 1 || slot.row < rows;
    /* y's row and dx's (dx's vectors line up with y's or go per element),
     * then dy's, loaded by y's vector slots. */
    const RowPtrs p = row_ptrs(y, dx, slot.row, active, row_stride);
    const RowPtrs q = row_ptrs(dy, dx, slot.row, active, row_stride);

    Held hy, hd;
    load_rows(hy, hd, p, q, slot.lane, cols, active);
    const float sum = row_reduce(thread_dot(hy, hd), partial_sum, box_sum, true, SumOp());
    store_row(p, slot.lane, cols, active, [&](int it, u32(&out)[NWORDS]) {
        vector_words(out, [&](int k) { return grad_value(hy, hd, it, k, sum); });
    });
    plant_overrun(p, slot.row, rows, slot.lane, cols);
}
#endif
