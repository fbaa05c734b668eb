/* linear_ce_blocks.cu: the two small kernels of a linear cross-entropy
 * whose chunks' logits are made a vocabulary block at a time
 * (src/driver/lce.c), beside the cross-entropy kinds' own.
 *
 * Idea: no kernel sees a whole row of logits, only a block of its
 * columns. For each block the loss kind's kernel (every label ignored)
 * gives the block's log-sum-exp, and tuned_lce_pick keeps the target
 * logit of the rows whose label falls in the block. After the last block
 * tuned_lce_combine makes each row's log-sum-exp from its blocks' (the
 * largest taken out first, so no exp overflows) and the row's loss,
 * lse - x_y, 0 for an ignored row. The backward kind then takes that lse
 * over each block as a slice of the classes.
 *
 * Both kernels take a thread a row and launch 256 threads a block, rows
 * / 256 blocks rounded up (a chunk's rows; the blocks' loop per row is
 * at most 64 long).
 *
 * Variants (codegen prepends the defines, softmax_common.cu for ESIZE and
 * bits_to_float):
 *   1. T_DTYPE  0 fp16, 1 bf16, 2 fp32: the logits' element
 *
 * Checked against: the float64 linear cross-entropy of
 * src/driver/lce_reference.c: every chunk config, blocks or not, runs on a
 * small instance and is compared with it before it is timed. */

/* target[row] = logits[row][labels[row] - first] where that column is in
 * the block (0 <= column < cols); other rows are left as they are. */
extern "C" __global__ void __launch_bounds__(256)
tuned_lce_pick(const unsigned char *logits, int rows, int cols, const long long *labels,
               long long first, float *target)
{
    const int row = blockIdx.x * 256 + threadIdx.x;
    if (row >= rows)
        return;
    const long long column = labels[row] - first;
    if (column < 0 || column >= cols)
        return;
    const unsigned char *at = logits + ((long long)row * cols + column) * ESIZE;
#if ESIZE == 2
    const u32 bits = *(const u16 *)at;
#else
    const u32 bits = *(const u32 *)at;
#endif
    target[row] = bits_to_float(bits);
}

/* lse[row] = log sum_b exp(block_lse[b][row]) over blocks blocks (rows
 * apart); loss[row] = lse - target[row], or 0 where the label is
 * ignore_index. A row whose blocks are all -inf has lse -inf. */
extern "C" __global__ void __launch_bounds__(256)
tuned_lce_combine(const float *block_lse, int blocks, int rows, const long long *labels,
                  long long ignore_index, const float *target, float *lse, float *loss)
{
    const int row = blockIdx.x * 256 + threadIdx.x;
    if (row >= rows)
        return;
    float largest = NEG_INF;
    for (int b = 0; b < blocks; b++)
        largest = fmaxf(largest, block_lse[(long long)b * rows + row]);
    float sum = 0.0f;
    for (int b = 0; b < blocks; b++)
        sum += expf(block_lse[(long long)b * rows + row] - largest);
    const float whole = largest == NEG_INF ? largest : largest + logf(sum);
    lse[row] = whole;
    loss[row] = labels[row] == ignore_index ? 0.0f : whole - target[row];
}
