/* softmax_rows.cu: family "rows", a row held in registers by a group of
 * threads: part of a warp (short rows), one or more warps, a whole block, or
 * a thread-block cluster of up to 16 blocks (long rows, sm_90). Softmax,
 * or with T_LOG log_softmax, of s x (s the scale parameter, s > 0).
 *
 * Idea: a group of TPR = T_WARPS*32/T_ROWS threads in each of T_CLUSTER
 * blocks owns one row and runs the stages of softmax_rows_common.cu: load,
 * max, exp-and-sum, reduce, store. A cluster's blocks push their values
 * into each other's mailboxes in distributed shared memory (mbarriers
 * count the bytes in; no fenced cluster barrier, and none before exit);
 * with T_FUSED in a small cluster each warp pushes its (max, sum) pair
 * itself.
 * Rows cut over blocks of the grid (T_GRID > 1) are softmax_grid.cu's.
 *
 * Variants (codegen prepends the defines, then softmax_common.cu and
 * softmax_rows_common.cu, which explains each):
 *   1. T_DTYPE      0 fp16, 1 bf16, 2 fp32
 *   2. T_WARPS      warps per block: 1, 2, 4, 8, 16, 32
 *   3. T_ROWS       rows per block: 1 to 32 * T_WARPS
 *   4. T_CLUSTER    blocks per row (a cluster; 1 = none; else T_ROWS = 1)
 *   5. T_MIN_BLOCKS blocks per SM the registers must leave room for (1, 2, 4)
 *   6. T_VEC        elements per vector access (at most 16 bytes)
 *   7. T_ITERS      vector accesses per thread per row
 *   8. T_COLS       the column count the source is generated for
 *   9. T_HEAD_FREE  1: every row starts on a vector boundary
 *  10. T_LD         0 ld.global, 1 .nc, 2 .cs
 *  11. T_ST         0 st.global, 1 .cs
 *  12. T_REG_PACKED 1: keep the loaded words, convert on use
 *  13. T_EXP16      1: keep the exps rounded to the 16-bit dtype
 *  14. T_FUSED      0: max, then sum (two rounds); 1: (max, sum) pairs
 *  15. T_PLANT_BUG  test builds only: 1 or 2, a planted bug
 *  16. T_LOG        1: log_softmax
 *  17. T_STASH      passes 1 .. T_STASH of a thread's row part kept in
 *                   shared memory (cp.async), not in registers
 *
 * Checked against: the float64 reference in reference.cu (per element, with
 * dtype tolerances, NaN for NaN), itself checked against a CPU float64
 * softmax by the evaluator before any variant is timed. */

extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS) CLUSTER_ATTRIBUTE
tuned_softmax_rows(const unsigned char *x, unsigned char *y, long long rows, int cols,
                   long long row_stride, float scale)
{
    __shared__ float partial_max[T_WARPS];
    __shared__ float partial_sum[T_WARPS];
    __shared__ Mailbox box_max, box_sum;
    __shared__ PairMailbox box_pairs;

    open_mailboxes(box_max, box_sum, box_pairs);
    const RowSlot slot = row_slot();
    /* Threads past the last row still take part in the barriers. With one
     * row a block (or a cluster) the launch has exactly one block (group)
     * per row: every thread is active. */
    const bool active = T_ROWS == 1 || slot.row < rows;
    const RowPtrs p = row_ptrs(x, y, slot.row, active, row_stride);

    const float ks = scale * LOG2E;
    Held h;
    load_row(h, p, slot.lane, cols, active);
    const float max = reduce_max(thread_max(h), partial_max, box_max);
    float sum = exp_and_sum(h, max, ks);
    float row_max = max;
    reduce_row(row_max, sum, partial_max, partial_sum, box_sum, box_pairs, ks);
    const RowOut o = row_out(max, row_max, sum, scale, ks);
    store_row(p, slot.lane, cols, active,
              [&](int it, u32(&out)[NWORDS]) { forward_words(h, it, o, out); });
    plant_overrun(p, slot.row, rows, slot.lane, cols);
}
