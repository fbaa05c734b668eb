/* softmax_grid.cu: family "rows" with a row cut across T_GRID blocks of the
 * grid (long rows on few of them: a cooperative launch keeps all blocks
 * resident at once).
 *
 * Idea: the T_GRID blocks of a row run the stages of
 * softmax_rows_common.cu (load, max, exp-and-sum, reduce, store) over a
 * row of ROW_THREADS = T_WARPS*32*T_GRID threads, the reduce stage always
 * the one-round (max, sum) pairs, then combine their blocks' pairs through
 * global memory (softmax_grid_common.cu: one round, tags from the GPU, so
 * that CUDA graph replays work). Hence two more parameters than
 * softmax_rows.cu: the workspace and the launch's number. Softmax, or with
 * T_LOG log_softmax, of s x (s the scale parameter, s > 0).
 *
 * Variants (codegen prepends the defines, then softmax_common.cu,
 * softmax_rows_common.cu, which explains each, and
 * softmax_grid_common.cu):
 *   1. T_DTYPE      0 fp16, 1 bf16, 2 fp32
 *   2. T_WARPS      warps per block: 1, 2, 4, 8, 16, 32 (T_ROWS = 1,
 *                   T_CLUSTER = 1, T_FUSED = 1)
 *   3. T_GRID       blocks per row: 2 to TUNED__GRID_MAX
 *   4. T_GRID_SLOTS slots of the workspace; launch n uses slot n % T_GRID_SLOTS
 *   5. T_MIN_BLOCKS blocks per SM the registers must leave room for (1, 2, 4)
 *   6. T_VEC        elements per vector access (at most 16 bytes)
 *   7. T_ITERS      vector accesses per thread per row
 *   8. T_COLS       the column count the source is generated for
 *   9. T_HEAD_FREE  1: every row starts on a vector boundary
 *  10. T_LD         0 ld.global, 1 .nc, 2 .cs
 *  11. T_ST         0 st.global, 1 .cs
 *  12. T_REG_PACKED 1: keep the loaded words, convert on use
 *  13. T_EXP16      1: keep the exps rounded to the 16-bit dtype
 *  14. T_PLANT_BUG  test builds only: 1 or 2, a planted bug
 *  15. T_LOG        1: log_softmax
 *
 * Checked against: the float64 reference in reference.cu, like every
 * family (the GPU tests run splits on long, ragged and unaligned rows). */

#if !T_FUSED
#error "a forward grid split reduces one-round (max, sum) pairs"
#endif

extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS)
tuned_softmax_grid(const unsigned char *x, unsigned char *y, long long rows, int cols,
                   long long row_stride, float scale, unsigned char *work, unsigned launch)
{
    __shared__ float partial_max[T_WARPS];
    __shared__ float partial_sum[T_WARPS];
    __shared__ float exchange_max[1];
    __shared__ float exchange_sum[1];
    /* T_CLUSTER is 1: the grid's workspace joins the blocks */
    Mailbox no_cluster;
    PairMailbox no_pairs;

    const RowSlot rs = row_slot();
    const int lane = rs.lane;
    const long long row = rs.row;
    const bool active = true;
    const RowPtrs p = row_ptrs(x, y, row, active, row_stride);

    const float ks = scale * LOG2E;
    const unsigned slot = launch % T_GRID_SLOTS;
    const u64 arrival = threadIdx.x == 0 ? grid_arrive(work, slot) : 0u;
    Held h;
    load_row(h, p, lane, cols, active);
    const float max = thread_max(h);
    float sum = exp_and_sum(h, max, ks);
    float row_max = max;
    reduce_row(row_max, sum, partial_max, partial_sum, no_cluster, no_pairs, ks);
    grid_combine(row_max, sum, work, slot, arrival, exchange_max, exchange_sum, ks);
    const RowOut o = row_out(max, row_max, sum, scale, ks);
    store_row(p, lane, cols, active,
              [&](int it, u32(&out)[NWORDS]) { forward_words(h, it, o, out); });
    plant_overrun(p, row, rows, lane, cols);
}
