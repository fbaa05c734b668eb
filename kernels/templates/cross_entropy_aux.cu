/* cross_entropy_aux.cu: the cross-entropy kinds' helper kernel that is not
 * the loss itself: rescaling a gradient computed for an upstream gradient
 * of 1 once the real one is known.
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
 * Checked against: the Python package's tests, which compare the gradient
 * after an upstream gradient other than 1 with F.cross_entropy's. */

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
