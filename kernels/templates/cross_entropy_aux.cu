/* cross_entropy_aux.cu: the cross-entropy kinds' helper kernels that are
 * not the loss itself: rescaling a gradient computed for an upstream
 * gradient of 1 once the real one is known, and the reduced loss of a
 * "sum" or "mean" call.
 *
 * Idea: the fused kind writes d loss / d x during the forward, when the
 * gradient flowing into the loss is not known yet; nearly always it is 1
 * (loss.backward()). tuned_cross_entropy_rescale multiplies the gradient
 * by *factor, a device scalar, and every block returns at once when it is
 * 1, so the common case moves no byte and nothing waits on the host (the
 * op stays capturable in a CUDA graph). The launch has a few blocks an SM
 * (the caller's grid), each walking rows at the grid's stride and a row's
 * elements at the block's: a block a 256 elements would schedule a
 * million blocks at 8192 x 128256 only to return. Elements are read and
 * written in the dtype, the product formed in fp32 and rounded once.
 *
 * Variants (codegen prepends the defines, softmax_common.cu for ESIZE and
 * the conversions):
 *   1. T_DTYPE  0 fp16, 1 bf16, 2 fp32
 *
 * The reduced loss (tuned_cross_entropy_total, when a call asks for it):
 * the rows' losses summed and times the gradient's scale, in the library
 * call, so that a framework's call returns its loss without launching a
 * reduction of its own; at the shapes whose kernels are short, each
 * framework operation costs the host more than a kernel launch
 * (docs/decisions.md). One block: a thread sums its rows in a fixed order
 * in fp64, the warps' sums are added in a fixed order, so every call
 * gives the same bits; a NaN row makes the total NaN, as a sum would.
 *
 * Checked against: the Python package's tests, which compare the gradient
 * after an upstream gradient other than 1, and the reduced loss, with
 * F.cross_entropy's. */

extern "C" __global__ void __launch_bounds__(256)
tuned_cross_entropy_rescale(unsigned char *grad, long long rows, int cols, long long row_stride,
                            const float *factor)
{
    const float f = *factor;
    if (f == 1.0f)
        return;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        unsigned char *r = grad + row * row_stride * ESIZE;
        for (int c = threadIdx.x; c < cols; c += 256) {
            unsigned char *p = r + (long long)c * ESIZE;
#if ESIZE == 2
            const u32 bits = *(const unsigned short *)p;
            *(unsigned short *)p = (unsigned short)float_to_bits(bits_to_float(bits) * f);
#else
            *(float *)p = *(const float *)p * f;
#endif
        }
    }
}

/* total[0] = (sum over rows of loss[r]) * scale[0] (scale NULL: 1): the
 * gradient's scale, so the reduced loss and the gradient agree (mean: the
 * upstream gradient over the count of valid rows, which
 * tuned_cross_entropy_count wrote before the loss kernel; none valid: inf,
 * and 0 * inf is NaN, as torch's 0 / 0). One block of CE_BLOCK_THREADS
 * after the loss kernel, on the same stream. */
extern "C" __global__ void __launch_bounds__(CE_BLOCK_THREADS)
tuned_cross_entropy_total(const float *loss, long long rows, const float *scale, float *total)
{
    double sum = 0.0;
    for (long long i = threadIdx.x; i < rows; i += CE_BLOCK_THREADS)
        sum += (double)loss[i];
    const double all = ce_block_sum(sum);
    if (threadIdx.x == 0)
        total[0] = (float)(all * (double)(scale != NULL ? scale[0] : 1.0f));
}
